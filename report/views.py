"""The views of the other result documents (ceiling sweep, the series' benchmark, the step breakdown
and PDL, two-GPU contention, conformance, sanitizers, SASS, end to end): plain dicts of figures, the
words from :mod:`report.words`."""

from __future__ import annotations

import re
from typing import Any, Mapping

from gpukit.geometry import Ring
from suite.stats import median, verdict
from report import words
from report.benchmarks import renamed
from report.gather import Doc, regime, regime_key

KNEE_SHARE = 0.97  # the open question's "knee": the fewest bytes in flight within this share of the best ring


SWEEP_PATHS = (
    ("best_ring_flat_gbps", "TMA ring, flat"),
    ("best_ring_gather_gbps", "TMA ring, NVFP4 gather"),
    ("best_ldg_flat_gbps", "LDG grid, flat"),
    ("best_ldg_gather_gbps", "LDG grid, NVFP4 gather"),
)


def ceiling_view(doc: Doc | None, png: str | None, default_ring: Ring | None) -> dict[str, Any] | None:
    if not doc:
        return None
    s = doc.get("summary") or {}
    sm = [r["gather_gbps"] for key in ("ring", "ldg") for r in doc.get(key) or [] if r.get("gather_gbps")]
    return {
        "copy_engine_gbps": s.get("copy_engine_gbps"),
        "best": [{"label": label, **s[key], **_ring_in_flight(s[key])} for key, label in SWEEP_PATHS if s.get(key)],
        "skipped": len(doc.get("skipped") or []),
        "synthetic": bool(doc.get("synthetic")),
        "png": png,
        "command": doc.get("command"),
        "best_sm_gbps": max(sm) if sm else None,
        "knee": knee(doc, default_ring),
    }


def _ring_in_flight(best: Doc) -> dict[str, Any]:
    """A sweep summary entry of a ring (config CTASxSTAGESxCHUNK): its bytes in flight by Ring's rule."""
    try:
        return {"bytes_in_flight": Ring.parse(best["config"]).bytes_in_flight}
    except (KeyError, ValueError):
        return {}  # an LDG grid (CTAS x threads): its bytes in flight as stored


def knee(doc: Doc, default_ring: Ring | None) -> dict[str, Any] | None:
    """The fewest ring bytes in flight within :data:`KNEE_SHARE` of the best ring (NVFP4 gather), where
    the default ring sits against it, and how far the rings past it fall below the best."""
    rings = [r for r in doc.get("ring") or [] if r.get("gather_gbps")]
    if not rings:
        return None
    # ceiling.json of tree e1aaf7c1421c stored ctas x stages x chunk; the rule is (stages - 1) chunks per CTA
    rings = [{**r, "bytes_in_flight": Ring(r["ctas"], r["stages"], r["chunk_bytes"]).bytes_in_flight} for r in rings]
    best = max(r["gather_gbps"] for r in rings)
    first = min(
        (r for r in rings if r["gather_gbps"] >= KNEE_SHARE * best), key=lambda r: r.get("bytes_in_flight") or 0
    )
    past = [r["gather_gbps"] for r in rings if (r.get("bytes_in_flight") or 0) >= first["bytes_in_flight"]]
    worst = min(past) / best
    out = {"share": KNEE_SHARE, "best_gbps": best, "ring": first, "past_worst": worst, "flat": worst >= KNEE_SHARE}
    if default_ring is not None:
        out["default"] = {
            "ring": default_ring,
            "position": words.above(default_ring.bytes_in_flight, first["bytes_in_flight"]),
        }
    return out


def series_bench_view(doc: Doc | None) -> dict[str, Any] | None:
    rows = (doc or {}).get("rows") or []
    if not rows:
        return None
    names = list(rows[0].get("ratio") or {})
    view_rows = [
        {
            "n": r["n"],
            "regime": regime(r),
            "upstream_us": (r.get("median_us") or {}).get("upstream"),
            "spread": r.get("aa_spread"),
            "tma_gbps": (r.get("gbps") or {}).get("tma"),
            "cells": [
                {
                    "ratio": (r.get("ratio") or {}).get(k),
                    "verdict": verdict((r.get("ratio") or {}).get(k), r.get("aa_spread")),
                }
                for k in names
            ],
        }
        for r in sorted(rows, key=lambda r: (regime_key(regime(r)), r["n"]))
    ]
    decides = view_rows[0]["regime"]
    per_name = {
        k: words.groups([{"n": r["n"], "verdict": r["cells"][i]["verdict"]} for r in view_rows if r["regime"] == decides])
        for i, k in enumerate(names)
    }
    return {
        "doc": doc,
        "args": doc.get("args") or {},
        "names": names,
        "rows": view_rows,
        "groups": per_name,
        "decides": decides,
        "regimes": sorted({r["regime"] for r in view_rows}, key=regime_key),
        "verified": sum(r.get("verified", r.get("verified_sets", 0)) for r in rows),
        "wrong": len(doc.get("failures") or []),
    }


def ratio_cells(ratios: Mapping[str, float], spread: float | None) -> list[dict[str, Any]]:
    return [{"name": k, "ratio": v, "verdict": verdict(v, spread)} for k, v in ratios.items()]


def step_pdl_view(doc: Doc | None, gather: dict[str, Any] | None) -> dict[str, Any] | None:
    s = (doc or {}).get("decode_step") or {}
    if not s:
        return None
    s = {**s, **{k: renamed(s[k]) for k in ("median_us", "ratio", "breakdown") if k in s}}
    ratio, spread = s.get("ratio") or {}, s.get("aa_spread")
    out: dict[str, Any] = {"doc": doc, "step": s, "spread": spread, "cells": ratio_cells(ratio, spread)}
    if "tma" in ratio:
        out["tma"] = {
            "ratio": ratio["tma"],
            "verdict": verdict(ratio["tma"], spread),
            "spread": spread,
            "within": words.within(ratio["tma"], spread),
        }
    if "tma_pdl" in ratio and "tma" in ratio:
        tma_gain = ratio["tma_pdl"] / ratio["tma"]  # time of tma / time of tma with PDL
        out["pdl"] = {"tma": {"ratio": tma_gain, "effect": words.effect(tma_gain, spread)}}
        if "upstream_pdl" in ratio:
            out["pdl"]["upstream"] = {
                "ratio": ratio["upstream_pdl"],
                "effect": words.effect(ratio["upstream_pdl"], spread),
            }
    b = {k: v for k, v in (s.get("breakdown") or {}).items() if v.get("calls")}
    out["breakdown"] = b
    first = next(iter(b.values()), None)
    out["breakdown_steps"] = first.get("steps") if first else None
    u = b.get("upstream")
    if u:
        per = u["per_step_us"]
        total = sum(per.values())
        out["shares"] = {"total": total, **{k: {"us": v, "share": v / total} for k, v in per.items()}}
        out["dilution"] = dilution(per["copy_us"] / total, gather, spread, s.get("misses_per_step"))
    if u and b.get("tma_pdl"):
        g0, g1 = u["mean_us"]["gap_us"], b["tma_pdl"]["mean_us"]["gap_us"]
        out["gap"] = {"before": g0, "after": g1, "change": words.change(g0, g1)}
    per_layer = {n: {**r, "median_us": renamed(r["median_us"]), "ratio": renamed(r.get("ratio") or {})}
                 for n, r in (doc.get("per_layer") or {}).items()}
    if per_layer:
        names = list(next(iter(per_layer.values())).get("ratio") or {})
        rows = [
            {
                "n": n,
                "upstream_us": r["median_us"].get("upstream"),
                "spread": r.get("aa_spread"),
                "cells": ratio_cells(r["ratio"], r.get("aa_spread")),
            }
            for n, r in per_layer.items()
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


def contention_view(doc: Doc | None) -> dict[str, Any] | None:
    rows = (doc or {}).get("summary") or []
    if not rows:
        return None
    kept = {k: [r["kept"] for r in rows if r["kernel"] == k] for k in dict.fromkeys(r["kernel"] for r in rows)}
    return {
        "doc": doc,
        "rows": rows,
        "args": doc.get("args") or {},
        "timed": len(doc.get("rows") or []),
        "wrong": doc.get("wrong_sets"),
        "gpus": sorted((doc.get("gpus") or {}).items()),
        "kept": {k: (min(v), max(v)) for k, v in kept.items() if v},
    }


def conformance_view(doc: Doc | None) -> dict[str, Any] | None:
    if not doc:
        return None
    t = doc.get("totals") or {}
    return {
        "doc": doc,
        "status": words.passed(doc.get("passed")),
        "tests": t.get("tests") or {},
        "totals": t,
        "groups": sorted((doc.get("groups") or {}).items()),
    }


def sanitizer_view(doc: Doc | None) -> dict[str, Any] | None:
    if not doc:
        return None
    return {"doc": doc, "status": words.passed(doc.get("passed")), "tools": list((doc.get("tools") or {}).items())}


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


def e2e_view(doc: Doc | None) -> dict[str, Any] | None:
    """The end-to-end A/B (``bench.e2e``): per slot-cache point, tokens/s of both variants over fresh
    processes, the ratio tma / unset and whether it stands out of the repeats' spread."""
    points = (doc or {}).get("points") or []
    if not points:
        return None
    rows = []
    for p in points:
        v = p.get("variants") or {}
        u, t_ = v.get("unset") or {}, v.get("tma") or {}
        spreads = [u.get("tokens_per_s_spread"), t_.get("tokens_per_s_spread")]
        rows.append({
            "slots": p.get("slots"),
            "miss_rate": (t_ or u).get("miss_rate_median"),
            "misses_per_token": (t_ or u).get("misses_per_token_median"),
            "unset": u, "tma": t_,
            "ratio": p.get("speedup"),
            "paired": (p.get("speedup_paired_min"), p.get("speedup_paired_max")),
            "settled": words.e2e_settled(p.get("speedup"), spreads),
            "spread": max((s for s in spreads if s is not None), default=None),
        })  # fmt: skip
    model = doc.get("model") or {}
    return {"doc": doc, "model": model, "settings": doc.get("settings") or {}, "rows": rows,
            "complete": bool(doc.get("complete")), "ids_identical": doc.get("ids_identical"),
            "runs": len(doc.get("runs") or [])}  # fmt: skip


def auto_view(doc: Doc | None) -> dict[str, Any] | None:
    """``FREETOKEN_DECODE_GATHER=auto`` in fresh processes (``bench.auto_stability``): what each probe chose,
    the candidates it timed and left out, its cost, and whether it left the cache as it found it."""
    runs, s = (doc or {}).get("runs") or [], (doc or {}).get("summary") or {}
    if not runs:
        return None
    choices = [r.get("choice") or {} for r in runs]
    timed = sorted({k for c in choices for k in (c.get("speed") or {})})
    left_out = sorted({k for c in choices for k in (c.get("left_out") or {})})
    return {
        "runs": s.get("runs"), "probes": sum(s.get("counts", {}).values()), "counts": s.get("counts") or {},
        "same": s.get("same_every_time"), "default": s.get("default"), "kept_default": s.get("kept_default_every_time"),
        "timed": timed, "left_out": left_out, "left_out_why": {k: c["left_out"][k] for c in choices for k in c.get("left_out") or {}},
        "probe_ms": (s.get("probe_ms_min"), s.get("probe_ms_median"), s.get("probe_ms_max")),
        "first_probe_ms": (min(c.get("probe_s", 0) for c in choices) * 1e3, max(c.get("probe_s", 0) for c in choices) * 1e3),
        "load_ms_max": s.get("load_ms_max"), "spread_max": s.get("spread_max"),
        "as_found": s.get("cache_left_as_found"), "tree": ((doc.get("provenance") or {}).get("tree") or "")[:12],
    }  # fmt: skip
