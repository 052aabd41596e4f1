"""Lay the model out with the jinja2 templates: the filters that format figures, and the pages. The filters that
print a figure (:data:`FIGURES`) mark it, and a page renders only where each line with a figure names its series
(:func:`labelled`); else :func:`render` raises, naming page and line."""

from __future__ import annotations

import functools
import re
from pathlib import Path
from typing import Any, Mapping

import jinja2

from freetoken_overlay.util import OverlayError
from suite import commands
from suite.geometry import fmt_bytes
from suite.stats import MARGIN
from report import words
from report.model import context, series_of

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
    """A ratio (base time / kernel time: > 1, the kernel faster), or a :class:`suite.stats.Comparison`'s, to 3
    decimals; other quotients print with ``num(3)``."""
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


FIGURE = "\ue000"  # before each figure FIGURES print, until labelled() has checked its line
FIGURES = {"num": num, "ratio": ratio, "pm": pm, "bytes": nbytes, "pct": pct}
#: a line's series: ``series `<hash>``` in prose, a table row's cell of it alone
LABEL = re.compile(r"series `[0-9a-f]{12}`|^\|.*\| `[0-9a-f]{12}` \|")


@jinja2.pass_context
def series(ctx: Mapping[str, Any], of: Any, cell: bool = False) -> str:
    """The series a figure ran (a document, a view's hash): ``series `<hash>```, ``other series `<hash>``` where
    it is not the page's series (``series_hash``), the hash alone as a table cell; "–" where none is recorded."""
    h = series_of(of) or "–"
    return f"`{h}`" if cell else f"series `{h}`" if h == ctx.get("series_hash") else f"other series `{h}`"


def _marked(f: Any) -> Any:
    return functools.wraps(f)(lambda *a, **kw: "–" if (out := f(*a, **kw)) == "–" else FIGURE + out)


FILTERS = {**{k: _marked(f) for k, f in FIGURES.items()}, "ns": ns, "series": series, **words.FILTERS}


def labelled(name: str, text: str) -> str:
    """``text`` without its figure marks; OverlayError naming each line of page ``name`` with a figure and no series."""
    bad = [f"  line {i}: {line.replace(FIGURE, '')}" for i, line in enumerate(text.splitlines(), 1)
           if FIGURE in line and not LABEL.search(line)]  # fmt: skip
    if bad:
        raise OverlayError(f"{name}: figures with no series (each names the series it ran: the series filter, "
                           "report/render.py):\n" + "\n".join(bad))  # fmt: skip
    return text.replace(FIGURE, "")


@functools.cache  # one per process: it compiles each template once (and again when its file changes)
def environment() -> jinja2.Environment:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(TEMPLATES), keep_trailing_newline=True, trim_blocks=True,
                             lstrip_blocks=True, undefined=jinja2.StrictUndefined)  # fmt: skip
    env.filters.update(FILTERS)
    # every command a page prints, and every measurement by its name (its session, command, file)
    env.globals.update(cmd=commands, measure=commands.MEASUREMENTS, margin=f"{MARGIN:.1%}")
    return env


def render(base: Path, patches: Path | None = None) -> dict[str, str]:
    """{page name: text} of README.md, REPORT.md and one ``PR-<n>.md`` per stacked pull request, from the documents
    under ``base`` and the series in ``patches`` (default: the checkout's patches/)."""
    env, ctx = environment(), context(base, patches)
    pages = {name: labelled(name, _tidy(env.get_template(t).render(ctx))) for name, t in PAGES.items()}
    for pr in ctx["prs"]:
        template, name = env.select_template([f"PR-{pr['number']}.md.j2", "PR-N.md.j2"]), f"PR-{pr['number']}.md"
        pages[name] = labelled(name, _tidy(template.render({**ctx, **pr["page"], "this": pr})))
    return pages


def _tidy(text: str) -> str:
    """At most one blank line in a row, one newline at the end."""
    lines, out = text.splitlines(), []
    for line in lines:
        if line.strip() or (out and out[-1].strip()):
            out.append(line.rstrip())
    return "\n".join(out).strip() + "\n"
