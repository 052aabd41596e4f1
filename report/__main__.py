"""``python -m report [--results DIR] [--out DIR] [--check]``: render the three pages (see ``report``)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from suite import results
from report.render import render


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report", description=__doc__.splitlines()[0])
    ap.add_argument("--results", type=Path, default=None, help="results directory (default: suite.results.root())")
    ap.add_argument("--out", type=Path, default=None, help="where the pages go (default: the results directory)")
    ap.add_argument("--check", action="store_true", help="write nothing; exit 1 if a page differs from its rendering")
    args = ap.parse_args(argv)
    base = args.results or results.root()
    out = args.out or base
    pages = render(base)
    if args.check:
        stale = [name for name, text in pages.items() if not (out / name).is_file() or (out / name).read_text() != text]
        for name in stale:
            print(f"[report] {out / name} is not the rendering of the JSON: run nox -s report", file=sys.stderr)
        return 1 if stale else 0
    out.mkdir(parents=True, exist_ok=True)
    for name, text in pages.items():
        (out / name).write_text(text)
    print(f"[report] {len(results.devices(base))} device(s): wrote {', '.join(str(out / n) for n in pages)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
