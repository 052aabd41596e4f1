"""``python -m report [--results DIR] [--out DIR] [--patches DIR] [--check]``: render the pages (see ``report``).

``--check`` writes nothing and exits 1 where a page is not the rendering of the JSON and the series in patches/ (a
PR text names its series and commits: an export makes it stale), or a ``PR-<n>.md`` is of a PR the series lacks;
with or without it, exit 1 where a line shows a figure and names no series (``report.render.labelled``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from freetoken_overlay.series import series_hash
from freetoken_overlay.util import OverlayError
from suite import commands, results
from report.render import render
from report.series import PULL_REQUESTS


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report", description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=None, help="results directory (default: suite.results.root())")
    ap.add_argument("--out", type=Path, default=None, help="where the pages go (default: the results directory)")
    ap.add_argument("--patches", type=Path, default=None, help="the series (default: the checkout's patches/)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs from its rendering")
    args = ap.parse_args(argv)
    base = args.results or results.root()
    out = args.out or base
    try:
        pages = render(base, args.patches)
    except OverlayError as exc:
        print(f"[report] error: {exc}", file=sys.stderr)
        return 1
    stale = [name for name, text in pages.items() if not (out / name).is_file() or (out / name).read_text() != text]
    extra = sorted(p.name for p in out.glob("PR-*.md") if p.name not in pages)
    for name in extra:  # never removed here: this run did not write it
        print(f"[report] {out / name}: the series has no such pull request (patches/{PULL_REQUESTS} names them); "
              "git rm it, or name its first patch there", file=sys.stderr)  # fmt: skip
    if args.check:
        series = series_hash(args.patches)
        for name in stale:
            print(f"[report] {out / name} does not describe the JSON and the series in patches/ (series {series}); "
                  f"re-render it: {commands.REPORT.nox} (or {commands.REPORT.line})", file=sys.stderr)  # fmt: skip
        if not stale + extra:
            print(f"[report] {', '.join(str(out / n) for n in pages)}: up to date with the JSON")
        return 1 if stale + extra else 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (out / name).write_text(text)
    print(f"[report] {len(results.devices(base))} device(s): wrote {', '.join(str(out / n) for n in pages)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
