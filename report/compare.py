"""``python -m report.compare``: upstream, its A/A control and tma per (regime, layers, n), with the paired verdict.

    python -m report.compare                     # every device's run (or: nox -s compare); --device h200: one
    python -m report.compare OLD.json NEW.json   # saved runs, each case's rows together, each under its run's name
    python -m report.compare --csv | head        # the same rows as CSV, on stdout

pytest-benchmark's own medians of each kernel from the store (``results/<device>/bench.json``,
:class:`suite.models.BenchRun`) in µs per layer (per step for the decode step; :data:`UNITS`), beside the case's
paired result (its :class:`suite.stats.Comparison`: ratio upstream / tma, A/A spread, verdict). A device's run is
named by the device, a file by its path past the folder the files share, without .json (``bench``,
``history/tree-<id>/bench.1``). Stdlib only.
"""

from __future__ import annotations

import argparse
import csv
import json
import os
import signal
import sys
from pathlib import Path

from suite import results
from suite.models import BenchRun
from suite.kernels import AA, BASE, Kernel
from suite.stats import MARGIN
from report.gather import decode_step_view, gather_row
from suite.geometry import regime_key

COLUMNS = ("regime", "layers", "n", "upstream µs", "upstream_aa µs", "tma µs", "ratio upstream/tma", "A/A spread",
           "verdict")  # fmt: skip
LEGEND = (f"ratio = upstream / tma, medians of paired alternating rounds (> 1: tma faster); tie: |ratio - 1| "
          f"within max(A/A spread, {MARGIN:.1%})")
UNITS = ("times: µs per layer (the decode step: µs per step); pytest-benchmark compare shows one round, "
         "the whole graph: layers x these")  # fmt: skip


def _times(view: dict) -> tuple:
    """pytest-benchmark's per-kernel medians where the run has them, else the paired medians."""
    t = view.get("benchmark") or view["us"]
    return tuple(t.get(k) for k in (BASE, AA, Kernel.TMA))


def _order(rec: tuple) -> tuple:
    """Numerically by (regime, layers, n); the decode step last (its n, misses per step, differs run to run)."""
    step = rec[0] == "decode step"
    return step, regime_key(rec[0]), rec[1], 0 if step else rec[2]


def records(bench: BenchRun) -> list[tuple]:
    """The rows as figures (case, the kernels' times, ratio, A/A spread, verdict), in :func:`_order`."""
    views = [((r["regime"], r["layers"], r["n"]), r) for r in map(gather_row, bench.gather)]
    if s := decode_step_view(bench):
        views.append((("decode step", s["layers"], s["misses_per_step"]), s))
    rows = ((*case, *_times(v), v["ratio"].ratio, v["ratio"].aa_spread, v["ratio"].verdict) for case, v in views)
    return sorted(rows, key=_order)


def side_by_side(runs: dict[str, BenchRun]) -> list[tuple]:
    """Every run's records with its name first, each case's rows together in the runs' order."""
    return sorted(((name, *r) for name, bench in runs.items() for r in records(bench)), key=lambda r: _order(r[1:]))


def read_runs(files: list) -> dict[str, BenchRun | None]:
    """Each saved run (an open file, closed here) by its name: its path past the folder all share, without .json."""
    top, runs = os.path.commonpath([os.path.dirname(os.path.abspath(f.name)) for f in files]), {}
    for f in files:
        with f:
            runs[Path(os.path.relpath(f.name, top)).with_suffix("").as_posix()] = BenchRun.read(json.load(f), f.name)
    return runs


def cells(rec: tuple) -> list[str]:
    """A record as the table prints it: times, ratio and A/A spread to 3 decimals."""
    reg, layers, n, up, aa, tma, ratio, aa_spread, verdict = rec
    n_text = f"{n:.1f}/step" if reg == "decode step" and n is not None else str(n)
    return [reg, str(layers), n_text, _cell(up), _cell(aa), _cell(tma), _cell(ratio), "–" if aa_spread is None else f"±{aa_spread:.3f}",
            verdict or "n/a"]  # fmt: skip


def _cell(x) -> str:
    return "–" if x is None else f"{x:,.3f}"


def header(slug: str, bench: BenchRun) -> str:
    m, p = bench.machine, bench.provenance
    series = p.get("series_hash") or m.get("series_hash")
    times = "pytest-benchmark medians" if bench.pytest_benchmark else "paired medians (run before the pytest-benchmark store)"
    return f"{m.get('device_name') or slug} ({bench.store}, series {series}; times: {times})"


def table(rows: list[list[str]], columns: tuple = COLUMNS) -> str:
    widths = [max(len(c), *(len(r[i]) for r in rows)) for i, c in enumerate(columns)]
    left = len(columns) - len(COLUMNS) + 1  # the names left-aligned, the figures right-aligned

    def line(cells) -> str:
        return "  ".join(c.ljust(w) if i < left else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    return "\n".join([line(columns), line(["-" * w for w in widths]), *(line(r) for r in rows)])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m report.compare", description=__doc__.splitlines()[0])
    one_of = ap.add_mutually_exclusive_group()
    one_of.add_argument("runs", nargs="*", default=[], type=argparse.FileType(), metavar="RUN.json",
                        help="saved runs of the benchmark (a results/<device>/bench.json, one in its history/, "
                             "a --benchmark-json file) instead of the devices' stores")  # fmt: skip
    one_of.add_argument("--device", action="append", help="a results/ directory name (repeatable; default: all)")
    ap.add_argument("--results", type=Path, help="the devices' results directory (default: suite.results.root())")
    ap.add_argument("--csv", action="store_true", help="CSV on stdout (the run's name first) instead of the table")
    args = ap.parse_args(argv)
    base = args.results or results.root()
    devices = args.device or results.devices(base)
    found = read_runs(args.runs) if args.runs else {s: BenchRun.load(s, base) for s in devices}
    runs = {name: doc for name, doc in found.items() if doc and (doc.gather or doc.decode_step)}
    if not runs or (args.runs and len(runs) < len(found)):
        print(f"[compare] no benchmark run in {', '.join(sorted(set(found) - set(runs))) or base}", file=sys.stderr)
        return 1
    rows, named = side_by_side(runs), len(runs) > 1  # several runs: each row starts with its run's name
    if args.csv:
        csv.writer(sys.stdout, lineterminator="\n").writerows([("run" if args.runs else "device",) + COLUMNS, *rows])
        return 0
    print("\n".join([*(f"{name}: " * named + header(name, b) for name, b in runs.items()), LEGEND, UNITS]))
    print(table([[r[0], *cells(r[1:])] if named else cells(r[1:]) for r in rows], ("run",) * named + COLUMNS))
    if skipped := sorted(set(found) - set(runs)):
        print(f"\n(no benchmark run: {', '.join(skipped)})")
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)  # a reader that stops early (`| head`) ends it quietly, as cat
    sys.exit(main())
