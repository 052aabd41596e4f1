"""pytest-benchmark storage of the committed results: one record per kernel, in pytest-benchmark's own layout.

    python -m bench.pbstore convert OLD.json results/h200/pytest-benchmark   # old single-record runs

The benchmark (``bench/test_bench_gather.py``) saves one record per kernel variant (params
``kernel``, ``layers``, ``n``) under ``--benchmark-storage=file://results/<device>/pytest-benchmark``,
i.e. ``<storage>/<machine id>/<NNNN>_gather.json``, which ``pytest-benchmark compare`` reads. Runs
saved before that held one record per case (decode_gather's rounds as its stats, the other kernels'
rounds only in ``extra_info``); :func:`convert` turns such a file into the per-kernel layout with
the same per-round times, so ``nox -s compare`` works on them too.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

#: bench.json's round keys -> the ``kernel`` param (gather), and the decode step's caches.
GATHER_KERNELS = {"upstream": "upstream", "upstream_aa": "upstream_aa", "ours": "decode_gather", "copy_engine": "copy_engine"}
STEP_KERNELS = {"unset": "upstream", "unset_aa": "upstream_aa", "tma": "decode_gather"}


def stats(seconds: list[float]) -> dict[str, Any]:
    """pytest-benchmark's stats block of one record (iterations 1, every round a data point)."""
    xs = sorted(seconds)
    n = len(xs)
    q = statistics.quantiles(xs, n=4, method="inclusive") if n > 1 else [xs[0]] * 3
    iqr = q[2] - q[0]
    mean = statistics.fmean(xs)
    sd = statistics.stdev(xs) if n > 1 else 0.0
    lo, hi = q[0] - 1.5 * iqr, q[2] + 1.5 * iqr
    return {
        "min": xs[0], "max": xs[-1], "mean": mean, "stddev": sd, "rounds": n, "median": statistics.median(xs),
        "iqr": iqr, "q1": q[0], "q3": q[2],
        "iqr_outliers": sum(1 for x in xs if x < lo or x > hi),
        "stddev_outliers": sum(1 for x in xs if abs(x - mean) > sd) if sd else 0,
        "outliers": f"{sum(1 for x in xs if abs(x - mean) > sd) if sd else 0};{sum(1 for x in xs if x < lo or x > hi)}",
        "ld15iqr": min((x for x in xs if x >= lo), default=xs[0]),
        "hd15iqr": max((x for x in xs if x <= hi), default=xs[-1]),
        "ops": 1.0 / mean if mean else 0.0, "total": sum(xs), "iterations": 1, "data": list(seconds),
    }  # fmt: skip


def _record(old: dict[str, Any], test: str, case_id: str, kernel: str, params: dict, seconds: list[float], extra: dict):
    name = f"{test}[{case_id}-{kernel}]"
    return {
        "group": old.get("group"), "name": name, "fullname": f"bench/test_bench_gather.py::{name}",
        "params": {**params, "kernel": kernel}, "param": f"{case_id}-{kernel}", "extra_info": extra,
        "options": old.get("options", {}), "stats": stats(seconds),
    }  # fmt: skip


def convert(doc: dict[str, Any]) -> dict[str, Any]:
    """An old single-record-per-case run -> one record per kernel with the same rounds (seconds)."""
    records = []
    for b in doc["benchmarks"]:
        x = b.get("extra_info") or {}
        common = {k: x.get(k) for k in ("speedup", "aa_spread", "verdict") if k in x}
        if "us_per_step" not in x:  # a gather case
            layers, n = b["params"]["layers"], b["params"]["n"]
            for key, kernel in GATHER_KERNELS.items():
                if x["rounds_us"].get(key):
                    records.append(_record(b, "test_gather_graph", f"L{layers}-n{n}", kernel,
                                           {"layers": layers, "n": n}, [us * 1e-6 for us in x["rounds_us"][key]],
                                           {"unit": x.get("unit"), **common, "converted_from": b["name"]}))  # fmt: skip
        else:
            for key, kernel in STEP_KERNELS.items():
                records.append(_record(b, "test_decode_step_offload_cache", "L40-step", kernel,
                                       {"layers": x.get("layers", 40), "n": "step"},
                                       [us * 1e-6 for us in x["rounds_us"][key]],
                                       {"unit": x.get("unit"), "cache": key, **common, "converted_from": b["name"]}))  # fmt: skip
    return {**doc, "benchmarks": records}


def machine_id(doc: dict[str, Any]) -> str:
    """pytest-benchmark's storage folder name: ``<system>-<implementation>-<python major.minor>-<bits>bit``."""
    m = doc["machine_info"]
    py = ".".join(m["python_version"].split(".")[:2])
    return f"{m['system']}-{m['python_implementation']}-{py}-64bit"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    c = sub.add_parser("convert", help="an old run -> <storage>/<machine id>/<NNNN>_<name>.json, one record per kernel")
    c.add_argument("old", type=Path)
    c.add_argument("storage", type=Path)
    c.add_argument("--name", default="0001_gather", help="file stem in the storage (default: %(default)s)")
    args = ap.parse_args(argv)
    doc = json.loads(args.old.read_text())
    new = convert(doc)
    out = args.storage / machine_id(doc) / f"{args.name}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(new, indent=4) + "\n")
    print(f"wrote {out}: {len(new['benchmarks'])} records from {len(doc['benchmarks'])}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
