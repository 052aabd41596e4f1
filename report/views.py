"""The views of the other result documents (ceiling sweep, the series' benchmark, the step breakdown
and PDL, two-GPU contention, conformance, sanitizers, SASS, end to end): plain dicts of figures, the
words from :mod:`report.words`."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from suite.geometry import Ring
from suite.models import AutoStability, Sweep, SweepRow, Gpu, Contention, E2E, Sanitize, SeriesBench, StepPdl
from suite.stats import median, verdict
from report import words
from report.geometries import geometries_view
from report.gather import Doc, regime_key
from suite.kernels import Kernel

KNEE_SHARE = 0.97  # the open question's "knee": the fewest bytes in flight within this share of the best ring


#: (summary key, label, the rows it is the best of, their figure)
SWEEP_PATHS = (
    ("best_ring_flat_gbps", "TMA ring, flat", "ring", "flat_gbps"),
    ("best_ring_gather_gbps", "TMA ring, NVFP4 gather", "ring", "gather_gbps"),
    ("best_ldg_flat_gbps", "LDG grid, flat", "ldg", "flat_gbps"),
    ("best_ldg_gather_gbps", "LDG grid, NVFP4 gather", "ldg", "gather_gbps"),
)


def sweep_view(doc: Sweep | None, png: str | None, default_ring: Ring | None) -> dict[str, Any] | None:
    if not doc:
        return None
    s = doc.summary
    best = [(label, getattr(s, key), rows, metric) for key, label, rows, metric in SWEEP_PATHS if s and getattr(s, key)]
    sm = [r.gather_gbps for r in doc.ring + doc.ldg if r.gather_gbps]
    return {
        "copy_engine_gbps": s.copy_engine_gbps if s else None,
        "best": [{"label": label, **b, **_ring_in_flight(doc, rows, metric, b)} for label, b, rows, metric in best],
        "skipped": len(doc.skipped),
        "synthetic": doc.synthetic,
        "png": png,
        "command": doc.command,
        "best_sm_gbps": max(sm) if sm else None,
        "knee": knee(doc, default_ring),
    }


def _ring_in_flight(doc: Sweep, rows: str, metric: str, best: Doc) -> dict[str, Any]:
    """The bytes in flight of a sweep summary's best ring by Ring's rule, from the swept row it names (its
    fields, not its label); an LDG grid's as stored."""
    row = next((r for r in getattr(doc, rows) if getattr(r, metric) == best.get("gbps")), None) if rows == "ring" else None
    return {"bytes_in_flight": _in_flight(row).bytes_in_flight} if row is not None and row.ctas else {}


def knee(doc: Sweep, default_ring: Ring | None) -> dict[str, Any] | None:
    """The fewest ring bytes in flight within :data:`KNEE_SHARE` of the best ring (NVFP4 gather), where
    the default ring sits against it, and how far the rings past it fall below the best."""
    rings = [r for r in doc.ring if r.gather_gbps]
    if not rings:
        return None
    # the sweep of tree e1aaf7c1421c stored ctas x stages x chunk; the rule is (stages - 1) chunks per CTA
    rings = [_in_flight(r) for r in rings]
    best = max(r.gather_gbps for r in rings)
    first = min((r for r in rings if r.gather_gbps >= KNEE_SHARE * best), key=lambda r: r.bytes_in_flight or 0)
    past = [r.gather_gbps for r in rings if (r.bytes_in_flight or 0) >= first.bytes_in_flight]
    worst = min(past) / best
    out = {"share": KNEE_SHARE, "best_gbps": best, "ring": first, "past_worst": worst, "flat": worst >= KNEE_SHARE}
    if default_ring is not None:
        out["default"] = {
            "ring": default_ring,
            "position": words.above(default_ring.bytes_in_flight, first.bytes_in_flight),
        }
    return out


def _in_flight(r: SweepRow) -> SweepRow:
    """A swept ring with its bytes in flight by Ring's rule."""
    return dataclasses.replace(r, bytes_in_flight=Ring(r.ctas, r.stages, r.chunk_bytes).bytes_in_flight)


def series_bench_view(doc: SeriesBench | None) -> dict[str, Any] | None:
    """A run of the series' benchmark: over several geometries (``--model``, :func:`report.geometries.geometries_view`)
    or, before the benchmark's schema ``/2``, one geometry's rows (with the wider grids it timed)."""
    if doc and doc.geometries:
        return geometries_view(doc)
    rows = doc.rows if doc else []
    if not rows:
        return None
    names = list(rows[0].ratio)
    view_rows = [
        {
            "n": r.n,
            "regime": r.regime,
            "upstream_us": r.median_us.get(Kernel.UPSTREAM),
            "spread": r.aa_spread,
            "tma_gbps": r.gbps.get(Kernel.TMA),
            "cells": [{"ratio": r.ratio.get(k), "verdict": verdict(r.ratio.get(k), r.aa_spread)} for k in names],
        }
        for r in sorted(rows, key=lambda r: (regime_key(r.regime), r.n))
    ]
    decides = view_rows[0]["regime"]
    per_name = {
        k: words.groups([{"n": r["n"], "verdict": r["cells"][i]["verdict"]} for r in view_rows if r["regime"] == decides])
        for i, k in enumerate(names)
    }
    return {
        "doc": doc,
        "format": "rows",
        "args": doc.args,
        "names": names,
        "rows": view_rows,
        "groups": per_name,
        "decides": decides,
        "regimes": sorted({r["regime"] for r in view_rows}, key=regime_key),
        "verified": sum(r.verified for r in rows),
        "wrong": len(doc.failures),
    }


def ratio_cells(ratios: Mapping[str, float], spread: float | None) -> list[dict[str, Any]]:
    return [{"name": k, "ratio": v, "verdict": verdict(v, spread)} for k, v in ratios.items()]


def step_pdl_view(doc: StepPdl | None, gather: dict[str, Any] | None) -> dict[str, Any] | None:
    s = doc.decode_step if doc else None
    if not s:
        return None
    ratio, spread = s.ratio or {}, s.aa_spread
    out: dict[str, Any] = {"doc": doc, "step": s, "spread": spread, "cells": ratio_cells(ratio, spread), "tma": None,
                           "pdl": None, "shares": None, "dilution": None, "gap": None, "per_layer": None}  # fmt: skip
    if Kernel.TMA in ratio:
        out[Kernel.TMA] = {
            "ratio": ratio[Kernel.TMA],
            "verdict": verdict(ratio[Kernel.TMA], spread),
            "spread": spread,
            "within": words.within(ratio[Kernel.TMA], spread),
        }
    if "tma_pdl" in ratio and Kernel.TMA in ratio:
        tma_gain = ratio["tma_pdl"] / ratio[Kernel.TMA]  # time of tma / time of tma with PDL
        out["pdl"] = {"tma": {"ratio": tma_gain, "effect": words.effect(tma_gain, spread)}}
        if "upstream_pdl" in ratio:
            out["pdl"][Kernel.UPSTREAM] = {
                "ratio": ratio["upstream_pdl"],
                "effect": words.effect(ratio["upstream_pdl"], spread),
            }
    b = {k: v for k, v in s.breakdown.items() if v.get("calls")}
    out["breakdown"] = b
    first = next(iter(b.values()), None)
    out["breakdown_steps"] = first.get("steps") if first else None
    u = b.get(Kernel.UPSTREAM)
    if u:
        per = u["per_step_us"]
        total = sum(per.values())
        out["shares"] = {"total": total, **{k: {"us": v, "share": v / total} for k, v in per.items()}}
        out["dilution"] = dilution(per["copy_us"] / total, gather, spread, s.misses_per_step)
    if u and b.get("tma_pdl"):
        g0, g1 = u["mean_us"]["gap_us"], b["tma_pdl"]["mean_us"]["gap_us"]
        out["gap"] = {"before": g0, "after": g1, "change": words.change(g0, g1)}
    if doc.per_layer:
        names = list(next(iter(doc.per_layer.values())).ratio)
        rows = [
            {
                "n": n,
                "upstream_us": r.median_us.get(Kernel.UPSTREAM),
                "spread": r.aa_spread,
                "cells": ratio_cells(r.ratio, r.aa_spread),
            }
            for n, r in doc.per_layer.items()
        ]
        out["per_layer"] = {"names": names, "rows": rows}
        if "tma_pdl" in names:
            out["per_layer"]["tma_pdl"] = words.groups(
                [{"n": r["n"], "verdict": c["verdict"]} for r in rows for c in r["cells"] if c["name"] == "tma_pdl"]
            )
    return out


def dilution(
    copy_share: float, gather: dict[str, Any] | None, spread: float | None, most: float | None
) -> dict[str, Any] | None:
    """The step's ratio if its copy kernels (``copy_share`` of its time) ran at the per-layer gather's median
    ratio over the headline rows with 1 to ``most`` misses (a step's layer misses no more than the step):
    T / (T - C + C/R), and whether that is within the step's A/A spread."""
    rows = [r for r in (gather or {}).get("main") or [] if r["ratio"] and 1 <= r["n"] <= (most or 0)]
    if not rows:
        return None
    per_layer = median(r["ratio"] for r in rows)
    step = 1 / (1 - copy_share * (1 - 1 / per_layer))
    return {
        "per_layer": per_layer,
        "ns": [r["n"] for r in rows],
        "step": step,
        "within": words.within(step, spread),
        "spread": spread,
    }


def contention_view(doc: Contention | None) -> dict[str, Any] | None:
    rows = doc.summary if doc else []
    if not rows:
        return None
    kept = {k: [r["kept"] for r in rows if r["kernel"] == k] for k in dict.fromkeys(r["kernel"] for r in rows)}
    return {
        "doc": doc,
        "rows": rows,
        "args": doc.args,
        "timed": len(doc.rows),
        "wrong": doc.wrong_sets,
        "gpus": sorted(doc.gpus.items()),
        "kept": {k: (min(v), max(v)) for k, v in kept.items() if v},
    }


def gpu_view(doc: Gpu | None) -> dict[str, Any] | None:
    if not doc:
        return None
    return {
        "doc": doc,
        "status": words.passed(doc.passed),
        "tests": doc.totals.get("tests") or {},
        "totals": doc.totals,
        "groups": sorted(doc.groups.items()),
    }


def sanitize_view(doc: Sanitize | None) -> dict[str, Any] | None:
    if not doc:
        return None
    return {"doc": doc, "status": words.passed(doc.passed), "tools": list(doc.tools.items())}


def sass_view(doc: Doc | None) -> dict[str, Any] | None:
    """Per arch, the registers of decode_gather's kernels (the other kernels of the cubin are named)."""
    reports = (doc or {}).get("reports") or []
    if not reports:
        return None

    def short(f: Doc) -> str:
        return re.sub(r"^void ", "", f.get("demangled") or f.get("name", "")).split("(")[0]

    def ours(f: Doc) -> bool:
        return "decode_gather_kernel" in f.get("name", "")

    rows = [
        {**r, "registers": "/".join(sorted({str(f.get("registers")) for f in r.get("functions") or [] if ours(f)}))}
        for r in reports
    ]
    functions = [f for r in reports for f in r.get("functions") or []]
    return {
        "doc": doc,
        "rows": rows,
        "nvcc": (reports[0].get("nvcc") or "").split(",")[-1].strip(),
        "ring": doc.get("ring"),
        "kernels": sorted({short(f) for f in functions if ours(f)}),
        "others": sorted({short(f) for f in functions if not ours(f)}),
    }


def e2e_view(doc: E2E | None) -> dict[str, Any] | None:
    """The end-to-end A/B (``bench.e2e``): per slot-cache point, tokens/s of both variants over fresh
    processes, the ratio tma / upstream and whether it stands out of the repeats' spread."""
    if not doc or not doc.points:
        return None
    rows = []
    for p in doc.points:
        u, t_ = p.variants.get(Kernel.UPSTREAM) or {}, p.variants.get(Kernel.TMA) or {}
        spreads = [u.get("tokens_per_s_spread"), t_.get("tokens_per_s_spread")]
        rows.append({
            "slots": p.slots,
            "miss_rate": (t_ or u).get("miss_rate_median"),
            "misses_per_token": (t_ or u).get("misses_per_token_median"),
            "upstream": u, "tma": t_,
            "ratio": p.speedup,
            "paired": (p.speedup_paired_min, p.speedup_paired_max),
            "settled": words.e2e_settled(p.speedup, spreads),
            "spread": max((s for s in spreads if s is not None), default=None),
            "auto": auto_arm(p),
        })  # fmt: skip
    return {"doc": doc, "model": doc.model, "settings": doc.settings, "rows": rows,
            "complete": doc.complete, "ids_identical": doc.ids_identical, "runs": len(doc.runs)}  # fmt: skip


def auto_arm(p: Any) -> dict[str, Any] | None:
    """The ``auto`` arm of one end-to-end point (a run with ``--auto``): its tokens/s, the kernel its probes
    kept, and auto / upstream with its paired range; None without the arm."""
    a, vs = p.variants.get(Kernel.AUTO), (p.versus_upstream or {}).get(Kernel.AUTO)
    if not a or not vs:
        return None
    spreads = [(p.variants.get(Kernel.UPSTREAM) or {}).get("tokens_per_s_spread"), a.get("tokens_per_s_spread")]
    return {"arm": a, "kernels": sorted(set(a.get("copy_kernel") or [])), "ratio": vs["speedup"],
            "paired": (vs["speedup_paired_min"], vs["speedup_paired_max"]),
            "settled": words.e2e_settled(vs["speedup"], spreads)}  # fmt: skip


def auto_view(doc: AutoStability | None) -> dict[str, Any] | None:
    """``FREETOKEN_DECODE_GATHER=auto`` in fresh processes (``bench.auto_stability``): what each probe chose,
    the candidates it timed and left out, its cost, and whether it left the cache as it found it."""
    if not doc or not doc.runs:
        return None
    runs, s = doc.runs, doc.summary
    choices = [r.get("choice") or {} for r in runs]
    timed = sorted({k for c in choices for k in (c.get("speed") or {})})
    left_out = sorted({k for c in choices for k in (c.get("left_out") or {})})
    return {
        "runs": s.runs, "probes": sum(s.counts.values()), "counts": s.counts,
        "same": s.same_every_time, "default": s.default, "kept_default": s.kept_default_every_time,
        "timed": timed, "left_out": left_out, "left_out_why": {k: c["left_out"][k] for c in choices for k in c.get("left_out") or {}},
        "probe_ms": (s.probe_ms_min, s.probe_ms_median, s.probe_ms_max),
        "first_probe_ms": (min(c.get("probe_s", 0) for c in choices) * 1e3, max(c.get("probe_s", 0) for c in choices) * 1e3),
        "load_ms_max": s.load_ms_max, "spread_max": s.spread_max,
        "as_found": s.cache_left_as_found, "tree": (doc.tree or "")[:12],
    }  # fmt: skip
