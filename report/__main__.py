"""``python -m report [--results DIR] [--out DIR] [--check]``: render the three pages (see ``report``)."""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
from pathlib import Path

from suite import results
from report.render import render


def _git(cwd: Path, *args: str) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    return proc.stdout if proc.returncode == 0 else ""


def _render_with_series_of(base: Path, page: Path) -> dict[str, str] | None:
    """The pages rendered from the JSON now and from patches/ as of the project commit that last wrote
    ``page`` (the series the page names): a change to patches/ alone does not make a page stale."""
    from freetoken_overlay import series

    commit = _git(page.parent, "log", "-1", "--format=%H", "--", page.name).strip()
    top = _git(page.parent, "rev-parse", "--show-toplevel").strip()
    if not commit or not top:
        return None
    try:
        rel = series.PATCHES_DIR.resolve().relative_to(Path(top).resolve()).as_posix()
    except ValueError:  # the pages live in another repository than patches/
        return None
    with tempfile.TemporaryDirectory(prefix="report-series-") as tmp:
        for name in _git(Path(top), "ls-tree", "--name-only", commit, f"{rel}/").split():
            data = subprocess.run(["git", "show", f"{commit}:{name}"], cwd=top, capture_output=True, check=True).stdout
            (Path(tmp) / Path(name).name).write_bytes(data)
        return render(base, Path(tmp))


def stale_pages(base: Path, out: Path) -> list[str]:
    """The pages under ``out`` that are not the rendering of the JSON under ``base``."""
    pages = render(base)
    stale = [name for name, text in pages.items() if not (out / name).is_file() or (out / name).read_text() != text]
    return [n for n in stale if not (out / n).is_file() or (_render_with_series_of(base, out / n) or {}).get(n)
            != (out / n).read_text()]  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report", description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=None, help="results directory (default: suite.results.root())")
    ap.add_argument("--out", type=Path, default=None, help="where the pages go (default: the results directory)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs from its rendering")
    args = ap.parse_args(argv)
    base = args.results or results.root()
    out = args.out or base
    if args.check:
        stale = stale_pages(base, out)
        for name in stale:
            print(f"[report] {out / name} is not the rendering of the JSON: run nox -s report", file=sys.stderr)
        if not stale:
            print(f"[report] {', '.join(str(out / n) for n in render(base))}: up to date with the JSON")
        return 1 if stale else 0
    pages = render(base)
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (out / name).write_text(text)
    print(f"[report] {len(results.devices(base))} device(s): wrote {', '.join(str(out / n) for n in pages)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
