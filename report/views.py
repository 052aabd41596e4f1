"""The views of the other result documents (ceiling sweep, the series' benchmark, the step breakdown and
PDL, two-GPU contention, conformance, sanitizers, SASS, end to end): plain dicts of the documents' figures
and :class:`suite.stats.Comparison` s, the words from :mod:`report.words`."""

from __future__ import annotations

import dataclasses
import re
from typing import Any, Mapping

from suite.geometry import Ring
from suite.kernels import TMA_KERNEL, Kernel
from suite.models import AutoStability, Contention, E2E, Gpu, Sanitize, SeriesBench, StepPdl, Sweep, SweepRow
from suite.results import series_of_version
from report import words
from report.geometries import geometries_view

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
        "doc": doc, "copy_engine_gbps": s.copy_engine_gbps if s else None,
        "best": [{"label": label, **b, **_ring_in_flight(doc, rows, metric, b)} for label, b, rows, metric in best],
        "skipped": len(doc.skipped), "synthetic": doc.synthetic, "png": png, "command": doc.command,
        "best_sm_gbps": max(sm) if sm else None, "knee": knee(doc, default_ring),
    }  # fmt: skip


def _ring_in_flight(doc: Sweep, rows: str, metric: str, best: Mapping[str, Any]) -> dict[str, Any]:
    """The bytes in flight (by Ring's rule) and spelling of a sweep summary's best ring, from the swept row it names
    (its fields, not its label); an LDG grid's as stored."""
    row = next((r for r in getattr(doc, rows) if getattr(r, metric) == best.get("gbps")), None) if rows == "ring" else None
    ring = Ring(row.ctas, row.stages, row.chunk_bytes) if row is not None and row.ctas else None
    return {"bytes_in_flight": ring.bytes_in_flight, "config": str(ring)} if ring else {}


def knee(doc: Sweep, default_ring: Ring | None) -> dict[str, Any] | None:
    """The fewest ring bytes in flight within :data:`KNEE_SHARE` of the best ring (NVFP4 gather), where
    the default ring sits against it, and how far the rings past it fall below the best."""
    rings = [_in_flight(r) for r in doc.ring if r.gather_gbps]  # the rule: (stages - 1) chunks per CTA
    if not rings:
        return None
    best = max(r.gather_gbps for r in rings)
    first = min((r for r in rings if r.gather_gbps >= KNEE_SHARE * best), key=lambda r: r.bytes_in_flight or 0)
    worst = min(r.gather_gbps for r in rings if (r.bytes_in_flight or 0) >= first.bytes_in_flight) / best
    out = {"share": KNEE_SHARE, "best_gbps": best, "ring": first, "past_worst": worst, "flat": worst >= KNEE_SHARE}
    if default_ring is not None:
        position = words.above(default_ring.bytes_in_flight, first.bytes_in_flight)
        out["default"] = {"ring": default_ring, "position": position}
    return out


def _in_flight(r: SweepRow) -> SweepRow:
    """A swept ring with its bytes in flight by Ring's rule."""
    return dataclasses.replace(r, bytes_in_flight=Ring(r.ctas, r.stages, r.chunk_bytes).bytes_in_flight)


def series_bench_view(doc: SeriesBench | None) -> dict[str, Any] | None:
    """A run of the series' benchmark over its model geometries (:func:`report.geometries.geometries_view`); a
    run of before its ``--model`` (the benchmark's schema ``/1``: history only) has no view."""
    return geometries_view(doc) if doc and doc.geometries else None


def step_pdl_view(doc: StepPdl | None) -> dict[str, Any] | None:
    s = doc.decode_step if doc else None
    if not s:
        return None
    b = {k: v for k, v in s.breakdown.items() if v.get("calls")}
    out: dict[str, Any] = {"doc": doc, "step": s, "breakdown": b, "shares": None, "gap": None, "per_layer": None,
                           "breakdown_steps": next(iter(b.values()), {}).get("steps")}  # fmt: skip
    u = b.get(Kernel.UPSTREAM)
    if u:
        per = u["per_step_us"]
        total = sum(per.values())
        out["shares"] = {"total": total, **{k: {"us": v, "share": v / total} for k, v in per.items()}}
    if u and b.get("tma_pdl"):
        g0, g1 = u["mean_us"]["gap_us"], b["tma_pdl"]["mean_us"]["gap_us"]
        out["gap"] = {"before": g0, "after": g1, "change": words.change(g0, g1)}
    if doc.per_layer:
        names = list(next(iter(doc.per_layer.values())).ratio)
        rows = [{"n": n, "upstream_us": r.median_us.get(Kernel.UPSTREAM), "aa_spread": r.aa_spread,
                 "cells": [r.ratio[k] for k in names]} for n, r in doc.per_layer.items()]  # fmt: skip
        pdl = words.groups((n, r.ratio["tma_pdl"].verdict) for n, r in doc.per_layer.items() if "tma_pdl" in r.ratio)
        out["per_layer"] = {"names": names, "rows": rows, "tma_pdl": pdl}
    return out


def contention_view(doc: Contention | None) -> dict[str, Any] | None:
    rows = doc.summary if doc else []
    if not rows:
        return None
    kept = {k: [r["kept"] for r in rows if r["kernel"] == k] for k in dict.fromkeys(r["kernel"] for r in rows)}
    return {"doc": doc, "rows": rows, "args": doc.args, "timed": len(doc.rows), "wrong": doc.wrong_sets,
            "gpus": sorted(doc.gpus.items()), "kept": {k: (min(v), max(v)) for k, v in kept.items() if v}}  # fmt: skip


def gpu_view(doc: Gpu | None) -> dict[str, Any] | None:
    if not doc:
        return None
    return {"doc": doc, "status": words.affirm("passed", doc.passed), "tests": doc.totals.get("tests") or {},
            "totals": doc.totals, "groups": sorted(doc.groups.items())}  # fmt: skip


def sanitize_view(doc: Sanitize | None) -> dict[str, Any] | None:
    return {"doc": doc, "status": words.affirm("passed", doc.passed), "tools": list(doc.tools.items())} if doc else None


def sass_view(doc: Mapping[str, Any] | None) -> dict[str, Any] | None:
    """Per arch, the registers of the series' kernels (the other kernels of the cubin are named)."""
    reports = (doc or {}).get("reports") or []
    if not reports:
        return None

    def short(f: Mapping[str, Any]) -> str:
        return re.sub(r"^void ", "", f.get("demangled") or f.get("name", "")).split("(")[0]

    def ours(f: Mapping[str, Any]) -> bool:
        return f"{TMA_KERNEL}_kernel" in f.get("name", "")

    functions = [f for r in reports for f in r.get("functions") or []]
    return {
        "doc": doc, "ring": doc.get("ring"), "nvcc": (reports[0].get("nvcc") or "").split(",")[-1].strip(),
        "rows": [{**r, "registers": "/".join(sorted({str(f.get("registers"))
                                                 for f in r.get("functions") or [] if ours(f)}))}
                 for r in reports],
        "kernels": sorted({short(f) for f in functions if ours(f)}),
        "others": sorted({short(f) for f in functions if not ours(f)}),
    }  # fmt: skip


def e2e_view(doc: E2E | None) -> dict[str, Any] | None:
    """The end-to-end A/B (``bench.e2e``): per slot-cache point, tokens/s of every kernel over its rounds in one
    process or its fresh processes, and each kernel's Comparison against upstream; ``rule``: tma's (``aa``: rounds
    with the A/A control; ``repeats``: fresh processes), ``noise`` the figure its verdict weighs the ratio against."""
    if not doc or not doc.points:
        return None
    rows = []
    for p in doc.points:
        u, t = p.kernels.get(Kernel.UPSTREAM) or {}, p.kernels.get(Kernel.TMA) or {}
        a, c = p.kernels.get(Kernel.AUTO), p.ratio.get(Kernel.TMA)
        rows.append({"slots": p.slots, "miss_rate": (t or u).get("miss_rate_median"), Kernel.UPSTREAM: u, Kernel.TMA: t,
                     "misses_per_token": (t or u).get("misses_per_token_median"), "ratio": c,
                     "noise": c and (c.aa_spread if c.rule == "aa" else c.repeat_range),
                     "auto": {"figures": a, "kernels": sorted(set(a.get("copy_kernel") or [])),
                              "ratio": p.ratio[Kernel.AUTO]} if a and Kernel.AUTO in p.ratio else None})  # fmt: skip
    rule = next((r["ratio"].rule for r in rows if r["ratio"]), "repeats")
    return {"doc": doc, "model": doc.model, "settings": doc.settings, "rows": rows, "rule": rule,
            "complete": doc.complete, "ids_identical": doc.ids_identical, "runs": len(doc.runs)}  # fmt: skip


def auto_view(doc: AutoStability | None) -> dict[str, Any] | None:
    """``auto`` in fresh processes (``bench.auto_stability``): what each ran and, where it read ``ft bench bw``'s
    pick (``profile``), whether it followed it and timed nothing while the cache was built; of a series whose auto
    timed a start-up probe, the kernels each probe timed and left out, its cost, and whether it left the cache
    as it found it."""
    if not doc or not doc.runs:
        return None
    s, choices = doc.summary, [r.get("choice") or {} for r in doc.runs]
    if any("pick" in r for r in doc.runs):
        x = s.extra
        return {"doc": doc, "profile": True, "runs": s.runs, "counts": s.counts, "same": s.same_every_time,
                "followed": x.get("followed_profile"), "captured_or_timed": x.get("captured_or_timed"),
                "ms": (x.get("auto_ms_max"), x.get("unset_ms_max")),
                "lines": sorted({r["pick"]["line"] for r in doc.runs})}  # fmt: skip
    probe_s = [c.get("probe_s", 0) * 1e3 for c in choices]
    why = {k: text for c in choices for k, text in (c.get("left_out") or {}).items()}
    return {
        "doc": doc, "profile": False, "runs": s.runs, "probes": sum(s.counts.values()), "counts": s.counts,
        "same": s.same_every_time, "default": s.default,
        "timed": sorted({k for c in choices for k in (c.get("ratio") or {})}),
        "left_out": sorted(why), "left_out_why": why,
        "probe_ms": (s.probe_ms_min, s.probe_ms_median, s.probe_ms_max), "first_probe_ms": (min(probe_s), max(probe_s)),
        "load_ms_max": s.load_ms_max, "aa_spread_max": s.aa_spread_max, "as_found": s.cache_left_as_found,
    }  # fmt: skip


def profile_view(doc: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The ``decode_gather`` entries of the profile ``ft bench bw`` wrote (a device's committed ``benchbw.json``), each
    with the series its freetoken version names."""
    entries = ((doc or {}).get("decode_gather") or {}).get("entries") or {}
    return [{**e, "series": series_of_version(e.get("freetoken"))} for e in entries.values()]
