"""``python -m report.compare``: upstream and decode_gather side by side per (regime, layers, n), from bench.json.

    python -m report.compare                  # every device with a bench.json (or: nox -s compare)
    python -m report.compare --device h200    # one device
    python -m report.compare --csv            # the same rows as CSV, on stdout

Ratio = upstream / decode_gather (> 1: decode_gather faster); the verdict is the report's (a tie
within the A/A spread of the same run, ``suite.stats``). Stdlib only: nox runs it in its own Python.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from suite import results
from report.model import decode_step_view, gather_row, regime_key

COLUMNS = ("regime", "layers", "n", "upstream µs", "decode_gather µs", "ratio up/ours", "A/A spread", "verdict")
LEGEND = "ratio = upstream / decode_gather (> 1: decode_gather faster); tie: |ratio - 1| within the A/A spread"


def records(bench: dict) -> list[tuple]:
    """The rows as figures, numerically ordered by (regime, layers, n); the decode step last (n: misses per step)."""
    rows = sorted(
        (gather_row(r) for r in bench.get("gather") or []), key=lambda r: (regime_key(r["regime"]), r["layers"], r["n"])
    )
    out = [_record(r["regime"], r["layers"], r["n"], r["us"].get("upstream"), r["us"].get("ours"), r) for r in rows]
    s = decode_step_view(bench)
    if s:
        out.append(
            _record("decode step", s["layers"], s["misses_per_step"], s["us"].get("unset"), s["us"].get("tma"), s)
        )
    return out


def _record(regime: str, layers, n, upstream, ours, view: dict) -> tuple:
    return (regime, layers, n, upstream, ours, view["ratio"], view["spread"], view["verdict"])


def cells(rec: tuple) -> list[str]:
    """A record as the table prints it: times, ratio and spread to 3 decimals."""
    reg, layers, n, up, ours, ratio, spread, verdict = rec
    n_text = f"{n:.1f}/step" if reg == "decode step" and n is not None else str(n)
    return [reg, str(layers), n_text, _f(up), _f(ours), _f(ratio), "–" if spread is None else f"±{spread:.3f}", verdict]


def _f(x) -> str:
    return "–" if x is None else f"{x:,.3f}"


def header(where: Path, bench: dict) -> str:
    m, p = bench.get("machine") or {}, bench.get("provenance") or {}
    series = p.get("series_hash") or m.get("series_hash")
    shown = where.relative_to(results.REPO_ROOT) if where.is_relative_to(results.REPO_ROOT) else where
    return f"{m.get('device_name') or where.parent.name} ({shown}, series {series})"


def table(rows: list[list[str]]) -> str:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(COLUMNS)]

    def line(cells) -> str:  # the regime left-aligned, the figures right-aligned
        return "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(COLUMNS), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.compare", description=__doc__.splitlines()[0])
    ap.add_argument("--device", action="append", help="a results/ directory name (repeatable; default: all)")
    ap.add_argument("--results", type=Path, default=None, help="results directory (default: suite.results.root())")
    ap.add_argument("--csv", action="store_true", help="CSV on stdout (device first) instead of the tables")
    args = ap.parse_args(argv)
    base = args.results or results.root()
    found = {slug: results.load("bench", slug, base) for slug in args.device or results.devices(base)}
    benches = {slug: doc for slug, doc in found.items() if doc and doc.get("gather")}
    if not benches:
        print(
            f"[compare] no bench.json with gather rows under {base} for {', '.join(found) or 'any device'}",
            file=sys.stderr,
        )
        return 1
    if args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(["device", *COLUMNS])
        for slug, bench in benches.items():
            w.writerows([slug, *r] for r in records(bench))
        return 0
    for i, (slug, bench) in enumerate(benches.items()):
        print(("\n" if i else "") + header(base / slug / results.KINDS["bench"].file, bench))
        print(LEGEND)
        print(table([cells(r) for r in records(bench)]))
    skipped = sorted(set(found) - set(benches))
    if skipped:
        print(f"\n(no per-layer gather rows: {', '.join(skipped)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
