"""The benchmark's views: per-layer gather tables, the decode step and the proposal's targets, from the
rows :mod:`report.benchmarks` reads out of the store (kernels named by the switch: ``upstream``,
``upstream_aa`` the A/A control, ``tma``). Gather rows carry a ``regime`` (``decode`` or ``replay``;
without one a row is ``replay``): the decode regime's tables come first and make the headline."""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from suite.geometry import REGIMES  # table order; a row without a regime is "replay"
from suite.geometry import Ring
from suite.models import BenchRun, CaseRow
from suite.stats import verdict
from report import words
from suite.kernels import Kernel

#: The proposal's targets the rows are checked against.
TARGETS = {"parity": 1.0, "ideal_slack": 1.10, "ideal_from_n": 4, "small_ns": (1, 2), "small_n_ratio": 1.05}


Doc = Mapping[str, Any]


def regime(row: Any) -> str:
    """A row's regime (a model's, normalised by its from_doc: ``replay`` where an older row has none)."""
    return row.regime


#: every regime a row may carry, in table order
REGIME_ORDER = REGIMES


def regime_key(name: str) -> int:
    return REGIME_ORDER.index(name) if name in REGIME_ORDER else len(REGIME_ORDER)


def gather_row(r: CaseRow) -> dict[str, Any]:
    return {
        "regime": r.regime,
        "layers": r.layers,
        "n": r.n,
        "bytes": r.bytes_per_layer,
        "us": r.us,
        "ratio": r.speedup,
        "spread": r.aa_spread,
        "verdict": verdict(r.speedup, r.aa_spread),
        "gbps": r.gbps.get(Kernel.TMA),
        "pct": r.pct_of_ceiling.get(Kernel.TMA),
        # each kernel's pytest-benchmark medians (µs per layer)
        "benchmark": {k: v.get("median") for k, v in r.benchmark.items()},
        # bytes at the copy-engine ceiling of the same run
        "ideal": r.bytes_per_layer / (r.ceiling_gbps * 1e9) * 1e6 if r.ceiling_gbps else None,
        "ceiling_gbps": r.ceiling_gbps,
    }


def main_rows(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per miss count, the row of the largest graph it was measured in (e.g. 40 layers, 4 at n = 600)."""
    best: dict[Any, dict[str, Any]] = {}
    for r in rows:
        if r["n"] not in best or r["layers"] > best[r["n"]]["layers"]:
            best[r["n"]] = r
    return [best[n] for n in sorted(best)]


def graphs_of(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``[{layers, ns}]`` of the graphs ``rows`` come from, largest first."""
    by_layers: dict[int, list[Any]] = {}
    for r in rows:
        by_layers.setdefault(r["layers"], []).append(r["n"])
    return [{"layers": k, "ns": by_layers[k]} for k in sorted(by_layers, reverse=True)]


def gather_view(bench: BenchRun | None) -> dict[str, Any] | None:
    rows = [gather_row(r) for r in (bench.gather if bench else [])]
    if not rows:
        return None
    keys = sorted({(r["regime"], r["layers"]) for r in rows}, key=lambda k: (regime_key(k[0]), -k[1]))
    tables = []
    for reg, layers in keys:
        sel = sorted((r for r in rows if (r["regime"], r["layers"]) == (reg, layers)), key=lambda r: r["n"])
        spreads = [r["spread"] for r in sel if r["spread"] is not None]
        tables.append(
            {
                "regime": reg,
                "layers": layers,
                "rows": sel,
                "groups": words.groups(sel),
                "max_spread": max(spreads) if spreads else None,
                "copy_engine": any(Kernel.COPY_ENGINE in r["us"] for r in sel),
            }
        )
    regimes = sorted({r["regime"] for r in rows}, key=regime_key)
    mains = [{"regime": reg, "rows": main_rows([r for r in rows if r["regime"] == reg])} for reg in regimes]
    head, main = regimes[0], mains[0]["rows"]
    ring = bench.tma_default_ring
    return {
        "tables": tables,
        "all_rows": rows,
        "regime": head,
        "regimes": regimes,
        "mains": mains,
        "main": main,
        "groups": words.groups(main),
        "graphs": graphs_of(main),
        "ring": Ring(ring["ctas"], ring["stages"], ring["chunk_bytes"]) if ring else None,
        "upstream": bench.upstream_kernel,
        "bytes_per_expert": bench.geometry.get("bytes_per_expert"),
        "rounds": bench.method.get("rounds"),
        "ceiling_start": bench.ceiling.get("start") or {},
        "ceiling_end": bench.ceiling.get("end") or {},
        "verified": bench.verified,
        "store": bench.store,
        "pytest_benchmark": bench.pytest_benchmark,
    }


def decode_step_view(bench: BenchRun | None) -> dict[str, Any] | None:
    d = bench.decode_step if bench else None
    if not d:
        return None
    r = d.rounds_us
    pairs = [u / t for u, t in zip(r.get(Kernel.UPSTREAM) or [], r.get(Kernel.TMA) or []) if t]
    lo, hi = (min(pairs), max(pairs)) if pairs else (None, None)
    return {
        **{f.name: getattr(d, f.name) for f in dataclasses.fields(d)},
        "us": d.us_per_step,
        "benchmark": {k: v.get("median") for k, v in d.benchmark.items()},
        "store": bench.store,
        "ratio": d.speedup,
        "spread": d.aa_spread,
        "verdict": verdict(d.speedup, d.aa_spread),
        "within": words.within(d.speedup, d.aa_spread),
        "pairs": {"lo": lo, "hi": hi, "count": len(pairs), "resolved": words.resolved(lo, hi)} if pairs else None,
        "auto": _step_auto(d),
    }


def _step_auto(d: Any) -> dict[str, Any] | None:
    """The decode step's ``auto`` arm (FREETOKEN_DECODE_GATHER=auto) against upstream, and what its probe chose."""
    ratio = d.ratio_by_kernel.get(Kernel.AUTO)
    if ratio is None:
        return None
    choice = d.auto_choice or {}
    return {"ratio": ratio, "spread": d.aa_spread, "verdict": verdict(ratio, d.aa_spread),
            "within": words.within(ratio, d.aa_spread), "chose": choice.get("label"),
            "reason": choice.get("reason")}  # fmt: skip


def targets_view(gather: dict[str, Any] | None, ceiling: dict[str, Any] | None) -> dict[str, Any] | None:
    """The proposal's targets checked against the headline rows (each the largest graph at its n)."""
    main = (gather or {}).get("main") or []
    if not main:
        return None
    t = TARGETS
    by_n = {r["n"]: r for r in main}
    below = [r for r in main if (r["ratio"] or 0) < t["parity"]]
    ideal = [
        {"n": r["n"], "x": r["us"][Kernel.TMA] / r["ideal"]}
        for r in main
        if r["n"] >= t["ideal_from_n"] and r["us"].get(Kernel.TMA) and r["ideal"]
    ]
    out: dict[str, Any] = {
        "targets": t,
        "graphs": gather["graphs"],
        "regime": gather["regime"],
        "parity": {"word": words.met(not below), "below": below},
        "ideal": {
            "word": words.met(all(x["x"] <= t["ideal_slack"] for x in ideal)),
            "rows": ideal,
            "over": [x for x in ideal if x["x"] > t["ideal_slack"]],
        }
        if ideal
        else None,
        "ceiling_gbps": main[-1].get("ceiling_gbps"),
        "best_sm_gbps": (ceiling or {}).get("best_sm_gbps"),
    }
    small = [by_n.get(n) for n in t["small_ns"]]
    if all(small):
        out["small"] = {"rows": small, "word": words.reached(all(r["ratio"] >= t["small_n_ratio"] for r in small))}
        r0, r1, r2 = by_n.get(0), small[0], small[1]
        if r0 and t["small_ns"] == (1, 2):
            o0, o1, o2, u1 = r0["us"][Kernel.TMA], r1["us"][Kernel.TMA], r2["us"][Kernel.TMA], r1["us"][Kernel.UPSTREAM]
            per_expert = o2 - o1
            need = u1 / t["small_n_ratio"]
            out["small"]["fixed"] = {
                "per_expert": per_expert,
                "fixed": o1 - per_expert,
                "launch": o0,
                "need": need,
                "need_fixed": need - per_expert,
                "in_flight": need - per_expert - o0,
                "stream_gbps": (gather.get("bytes_per_expert") or 0) / per_expert / 1e3 if per_expert > 0 else None,
            }
    return out
