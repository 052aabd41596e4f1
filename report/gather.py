"""The benchmark's views: per-layer gather tables, the decode step and the proposal's targets, from the
rows :class:`suite.models.BenchRun` reads out of the store (kernels named by the switch). Gather rows carry a
``regime`` (``decode`` or ``replay``): the decode regime's tables come first and make the headline."""

from __future__ import annotations

import dataclasses
from typing import Any

from suite.geometry import Ring, regime_key
from suite.kernels import Kernel
from suite.models import BenchRun, CaseRow
from suite.stats import Comparison
from report import words

#: The proposal's targets the rows are checked against.
TARGETS = {"parity": 1.0, "ideal_slack": 1.10, "ideal_from_n": 4, "small_ns": (1, 2), "small_n_ratio": 1.05}


def gather_row(r: CaseRow) -> dict[str, Any]:
    return {
        "regime": r.regime, "layers": r.layers, "n": r.n, "bytes": r.bytes_per_layer, "us": r.us,
        "ratio": r.ratio.get(Kernel.TMA) or Comparison(),
        "gbps": r.gbps.get(Kernel.TMA), "pct": r.pct_of_ceiling.get(Kernel.TMA),
        "benchmark": {k: v.get("median") for k, v in r.benchmark.items()},  # pytest-benchmark's, µs per layer
        "ideal": r.bytes_per_layer / (r.ceiling_gbps * 1e9) * 1e6 if r.ceiling_gbps else None,  # at the ceiling
        "ceiling_gbps": r.ceiling_gbps,
    }  # fmt: skip


def verdicts(rows: list[dict[str, Any]]) -> dict[str, list[Any]]:
    """:func:`report.words.groups` of rows that carry their ``ratio``."""
    return words.groups((r["n"], r["ratio"].verdict) for r in rows)


def main_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per miss count, the row of the largest graph it was measured in (e.g. 40 layers, 4 at n = 600)."""
    best: dict[Any, dict[str, Any]] = {}
    for r in sorted(rows, key=lambda r: -r["layers"]):  # a stable sort: the first row of the largest graph
        best.setdefault(r["n"], r)
    return [best[n] for n in sorted(best)]


def gather_view(bench: BenchRun | None) -> dict[str, Any] | None:
    rows = [gather_row(r) for r in (bench.gather if bench else [])]
    if not rows:
        return None
    tables = []
    for reg, layers in sorted({(r["regime"], r["layers"]) for r in rows}, key=lambda k: (regime_key(k[0]), -k[1])):
        sel = sorted((r for r in rows if (r["regime"], r["layers"]) == (reg, layers)), key=lambda r: r["n"])
        aa_spreads = [r["ratio"].aa_spread for r in sel if r["ratio"].aa_spread is not None]
        tables.append({"regime": reg, "layers": layers, "rows": sel, "groups": verdicts(sel),
                       "max_aa_spread": max(aa_spreads, default=None),
                       "copy_engine": any(Kernel.COPY_ENGINE in r["us"] for r in sel)})  # fmt: skip
    regimes = sorted({r["regime"] for r in rows}, key=regime_key)
    mains = [{"regime": reg, "rows": main_rows([r for r in rows if r["regime"] == reg])} for reg in regimes]
    main, ring = mains[0]["rows"], bench.tma_default_ring
    return {
        "tables": tables, "all_rows": rows, "regime": regimes[0], "regimes": regimes, "mains": mains, "main": main,
        "groups": verdicts(main),
        "graphs": [{"layers": k, "ns": [r["n"] for r in main if r["layers"] == k]}
                   for k in sorted({r["layers"] for r in main}, reverse=True)],
        "ring": Ring(**ring) if ring else None, "upstream": bench.upstream_kernel,
        "bytes_per_expert": bench.geometry.get("bytes_per_expert"), "rounds": bench.method.get("rounds"),
        "ceiling_start": bench.ceiling.get("start") or {}, "ceiling_end": bench.ceiling.get("end") or {},
        "verified": bench.verified, "store": bench.store, "pytest_benchmark": bench.pytest_benchmark,
        "tree": (bench.tree or "")[:12],
    }  # fmt: skip


def decode_step_view(bench: BenchRun | None) -> dict[str, Any] | None:
    d = bench.decode_step if bench else None
    if not d:
        return None
    auto, choice = d.ratio.get(Kernel.AUTO), d.auto_choice or {}
    return {
        **{f.name: getattr(d, f.name) for f in dataclasses.fields(d)},
        "us": d.us_per_step, "benchmark": {k: v.get("median") for k, v in d.benchmark.items()}, "store": bench.store,
        "ratio": d.ratio.get(Kernel.TMA) or Comparison(),
        "auto": {"ratio": auto, "chose": choice.get("label"), "reason": choice.get("line") or choice.get("reason")}
        if auto else None,  # "line": auto reads ft bench bw's pick; "reason": an older series' start-up probe
    }  # fmt: skip


def targets_view(gather: dict[str, Any] | None, ceiling: dict[str, Any] | None) -> dict[str, Any] | None:
    """The proposal's targets checked against the headline rows (each the largest graph at its n)."""
    main = (gather or {}).get("main") or []
    if not main:
        return None
    t, by_n = TARGETS, {r["n"]: r for r in main}
    below = [r for r in main if (r["ratio"].ratio or 0) < t["parity"]]
    ideal = [{"n": r["n"], "of_ideal": r["us"][Kernel.TMA] / r["ideal"]} for r in main
             if r["n"] >= t["ideal_from_n"] and r["us"].get(Kernel.TMA) and r["ideal"]]  # fmt: skip
    near = all(x["of_ideal"] <= t["ideal_slack"] for x in ideal)
    out: dict[str, Any] = {
        "targets": t, "graphs": gather["graphs"], "regime": gather["regime"],
        "parity": {"word": words.affirm("met", not below), "below": below},
        "ideal": ideal and {"word": words.affirm("met", near), "rows": ideal},
        "ceiling_gbps": main[-1].get("ceiling_gbps"), "best_sm_gbps": (ceiling or {}).get("best_sm_gbps"),
    }  # fmt: skip
    small = [by_n.get(n) for n in t["small_ns"]]
    if all(small):
        reached = words.affirm("reached", all(r["ratio"].ratio >= t["small_n_ratio"] for r in small))
        out["small"] = {"rows": small, "word": reached}
        r0, r1, r2 = by_n.get(0), small[0], small[1]
        if r0 and t["small_ns"] == (1, 2):
            o0, o1, o2, u1 = r0["us"][Kernel.TMA], r1["us"][Kernel.TMA], r2["us"][Kernel.TMA], r1["us"][Kernel.UPSTREAM]
            per_expert, need = o2 - o1, u1 / t["small_n_ratio"]
            out["small"]["fixed"] = {
                "per_expert": per_expert, "fixed": o1 - per_expert, "launch": o0, "need": need,
                "need_fixed": need - per_expert, "in_flight": need - per_expert - o0,
                "stream_gbps": (gather.get("bytes_per_expert") or 0) / per_expert / 1e3 if per_expert > 0 else None,
            }  # fmt: skip
    return out
