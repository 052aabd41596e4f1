"""Lay the model out with the jinja2 templates: the filters that format figures, and the three pages."""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

import jinja2

from suite import commands
from suite.geometry import fmt_bytes
from report import words
from report.model import context

TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGES = {"README.md": "README.md.j2", "REPORT.md": "REPORT.md.j2"}  # and PR-<n>.md: PR-<n>.md.j2, else PR-N.md.j2


def num(x: Any, digits: int = 2, unit: str = "") -> str:
    """A figure: thousands separated, ``digits`` decimals, "–" when missing."""
    if x is None:
        return "–"
    if isinstance(x, int) and not digits:
        return f"{x:,}{unit}"
    return f"{x:,.{digits}f}{unit}"


def ratio(x: Any) -> str:
    """A ratio, or a :class:`suite.stats.Comparison`'s, to 3 decimals."""
    return num(getattr(x, "ratio", x), 3)


def pm(x: Any, digits: int = 3) -> str:
    """A noise figure as ``±x`` (the A/A spread)."""
    return "–" if x is None else "±" + num(x, digits)


def nbytes(x: Any) -> str:
    return "–" if x is None else fmt_bytes(x) if x else "0"


def pct(x: Any, digits: int = 0) -> str:
    return num(x, digits, "%")


def ns(xs: Any) -> str:
    return ", ".join(str(x) for x in xs)


FILTERS = {"num": num, "ratio": ratio, "pm": pm, "bytes": nbytes, "pct": pct, "ns": ns, **words.FILTERS}


@functools.cache  # one per process: it compiles each template once (and again when its file changes)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), keep_trailing_newline=True, trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)  # fmt: skip
    env.filters.update(FILTERS)
    # every command a page prints, and every measurement by its name (its session, command, file)
    env.globals.update(cmd=commands, measure=commands.MEASUREMENTS)
    return env


def render(base: Path, patches: Path | None = None) -> dict[str, str]:
    """{page name: text} of README.md, REPORT.md and one ``PR-<n>.md`` per stacked pull request, from the documents
    under ``base`` and the series in ``patches`` (default: the checkout's patches/)."""
    env, ctx = environment(), context(base, patches)
    pages = {name: _tidy(env.get_template(t).render(ctx)) for name, t in PAGES.items()}
    for pr in ctx["prs"]:
        template = env.select_template([f"PR-{pr['number']}.md.j2", "PR-N.md.j2"])
        pages[f"PR-{pr['number']}.md"] = _tidy(template.render({**ctx, **pr["page"], "this": pr}))
    return pages


def _tidy(text: str) -> str:
    """At most one blank line in a row, one newline at the end."""
    lines, out = text.splitlines(), []
    for line in lines:
        if line.strip() or (out and out[-1].strip()):
            out.append(line.rstrip())
    return "\n".join(out).strip() + "\n"
