"""``python -m report.compare``: upstream, its A/A control and tma per (regime, layers, n), with the paired verdict.

    python -m report.compare                  # every device with a benchmark run (or: nox -s compare)
    python -m report.compare --device h200    # one device
    python -m report.compare --csv            # the same rows as CSV, on stdout

A thin layer over the store (``results/<device>/bench.json``, :class:`suite.models.BenchRun`): pytest-benchmark's
own medians of each kernel in µs per layer (per step for the decode step; ``pytest-benchmark compare`` prints
one round, the whole graph: :data:`UNITS`), beside the case's paired result measured in the same session (its
:class:`suite.stats.Comparison`: ratio upstream / tma, A/A spread, verdict). Stdlib only.
"""

from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from suite import results
from suite.models import BenchRun
from suite.kernels import AA, BASE, CANDIDATE
from report.gather import decode_step_view, gather_row
from suite.geometry import regime_key

COLUMNS = ("regime", "layers", "n", "upstream µs", "upstream_aa µs", "tma µs", "paired upstream/tma", "A/A spread",
           "verdict")  # fmt: skip
LEGEND = "paired = upstream / tma over alternating rounds (> 1: tma faster); tie: |paired - 1| within the A/A spread"
UNITS = ("times: µs per layer (the decode step: µs per step); pytest-benchmark compare shows one round, "
         "the whole graph: layers x these")  # fmt: skip


def _times(view: dict) -> tuple:
    """pytest-benchmark's per-kernel medians where the run has them, else the paired medians."""
    t = view.get("benchmark") or view["us"]
    return tuple(t.get(k) for k in (BASE, AA, CANDIDATE))


def records(bench: BenchRun) -> list[tuple]:
    """The rows as figures, numerically ordered by (regime, layers, n); the decode step last (n: misses per step)."""
    rows = sorted((gather_row(r) for r in bench.gather),
                  key=lambda r: (regime_key(r["regime"]), r["layers"], r["n"]))  # fmt: skip
    out = [(r["regime"], r["layers"], r["n"], *_times(r), *_decided(r["ratio"])) for r in rows]
    s = decode_step_view(bench)
    if s:
        out.append(("decode step", s["layers"], s["misses_per_step"], *_times(s), *_decided(s["ratio"])))
    return out


def _decided(c) -> tuple:
    return c.ratio, c.aa_spread, c.verdict


def cells(rec: tuple) -> list[str]:
    """A record as the table prints it: times, ratio and spread to 3 decimals."""
    reg, layers, n, up, aa, tma, ratio, spread, verdict = rec
    n_text = f"{n:.1f}/step" if reg == "decode step" and n is not None else str(n)
    return [reg, str(layers), n_text, _cell(up), _cell(aa), _cell(tma), _cell(ratio), "–" if spread is None else f"±{spread:.3f}",
            verdict or "n/a"]  # fmt: skip


def _cell(x) -> str:
    return "–" if x is None else f"{x:,.3f}"


def header(slug: str, bench: BenchRun) -> str:
    m, p = bench.machine, bench.provenance
    series = p.get("series_hash") or m.get("series_hash")
    times = "pytest-benchmark medians" if bench.pytest_benchmark else "paired medians (run before the pytest-benchmark store)"
    return f"{m.get('device_name') or slug} ({bench.store}, series {series}; times: {times})"


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
    found = {slug: BenchRun.load(slug, base) for slug in args.device or results.devices(base)}
    benches = {slug: doc for slug, doc in found.items() if doc and (doc.gather or doc.decode_step)}
    if not benches:
        print(f"[compare] no benchmark run under {base} for {', '.join(found) or 'any device'}", file=sys.stderr)
        return 1
    if args.csv:
        w = csv.writer(sys.stdout, lineterminator="\n")
        w.writerow(["device", *COLUMNS])
        for slug, bench in benches.items():
            w.writerows([slug, *r] for r in records(bench))
        return 0
    for i, (slug, bench) in enumerate(benches.items()):
        print(("\n" if i else "") + header(slug, bench))
        print(LEGEND)
        print(UNITS)
        print(table([cells(r) for r in records(bench)]))
    if skipped := sorted(set(found) - set(benches)):
        print(f"\n(no benchmark run: {', '.join(skipped)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
