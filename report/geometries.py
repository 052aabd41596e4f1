"""The series' benchmark run over several model geometries (``--model``, the benchmark's schema ``/2``): one
table over every geometry (tma against upstream per n, what ``auto`` chose), the lines the pull-request
texts carry for it (verdict counts, auto's choices) and the ring sweep's choice by today's rule."""

from __future__ import annotations

from typing import Any

from suite.kernels import VERDICTS, Kernel
from suite.models import SeriesBench, SeriesGeometry
from suite.models.docs import ring_choice
from suite.stats import Comparison
from suite.results import machine_line

def geometry_row(g: SeriesGeometry, r: Any, kernel: str = Kernel.TMA) -> dict[str, Any]:
    return {"model": g.model, "n": r.n, "regime": r.regime, "upstream_us": r.median_us.get(Kernel.UPSTREAM),
            "gbps": r.gbps.get(Kernel.UPSTREAM), "ratio": r.ratio.get(kernel) or Comparison(),
            "verified": r.verified}  # fmt: skip


def slower_view(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """What :func:`geometries_line` says of ``rows``: the slower ones, their n, how many rows."""
    slower = [r for r in rows if r["ratio"].verdict == "slower"]
    return {"slower": slower, "slower_ns": sorted({r["n"] for r in slower}), "rows_total": len(rows)}


def geometry_view(g: SeriesGeometry) -> dict[str, Any]:
    auto = g.auto or {}
    return {"model": g.model, "quant_format": g.quant_format, "expert_bytes": g.expert_bytes, "skipped": g.skipped,
            "rows": [geometry_row(g, r) for r in sorted(g.rows, key=lambda r: (r.regime, r.n))],
            "chose": auto.get("chose"), "default": auto.get("default"), "auto_line": auto.get("line"),
            "layers": g.extra.get("graph_layers"), "probe_ms": auto.get("probe_ms"), "load_ms": auto.get("load_ms"),
            "ratios": auto.get("ratio") and {"ratios": auto["ratio"], "threshold": auto["threshold"]}}


def verdict_counts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per n: ``{"n", "rows", "counts": {verdict: how many}, "slower": [the slower rows]}``, n ascending."""
    out = []
    for n in sorted({r["n"] for r in rows}):
        sel = [r for r in rows if r["n"] == n]
        counts = {v: sum(r["ratio"].verdict == v for r in sel) for v in VERDICTS}
        out.append({"n": n, "rows": len(sel), "counts": {v: c for v, c in counts.items() if c},
                    "slower": [r for r in sel if r["ratio"].verdict == "slower"]})  # fmt: skip
    return out


def _best_ratio(geos: list[dict[str, Any]], prefix: str = "") -> dict[str, Any] | None:
    """The fastest kernel (its name starting with ``prefix``) any probe timed against its default:
    ``{"ratio", "name", "model", "threshold"}`` (that probe's 1 + max(A/A spread, its margin))."""
    timed = [{"ratio": x, "name": name, "model": g["model"], "threshold": g["ratios"]["threshold"]} for g in geos
             for name, x in ((g["ratios"] or {}).get("ratios") or {}).items() if name.startswith(prefix)]  # fmt: skip
    return max(timed, key=lambda b: b["ratio"], default=None)


def auto_summary(geos: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What auto chose over the geometries; of a series whose auto timed a start-up probe (``probe``), how many
    kept their default, the others by name, and the best ratio any kernel (and any tma ring) reached against its
    default, with that probe's threshold (auto since reads ``ft bench bw``'s pick: nothing to time at start-up)."""
    probed = [g for g in geos if g["chose"]]
    if not probed:
        return None
    kept = [g for g in probed if g["chose"] == g["default"]]
    return {"geometries": len(probed), "kept": len(kept), "defaults": sorted({g["default"] for g in kept}),
            "probe": any(g["default"] is not None for g in probed), "chose": {g["model"]: g["chose"] for g in probed},
            "other": [{"model": g["model"], "chose": g["chose"], "default": g["default"]} for g in probed
                      if g["chose"] != g["default"]],
            "best": _best_ratio(probed), "best_tma": _best_ratio(probed, Kernel.TMA)}  # fmt: skip


def ring_view(choice: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ring sweep's scores and its choice (``best``: the ring to export; None: leave the ring unset), decided
    from the rows again (:func:`suite.models.docs.ring_choice`): a run's stored one may be of an older rule."""
    if not choice or not choice.get("scores"):
        return None
    scores = [{"ring": k, **s} for k, s in choice["scores"].items()]
    return {"default": choice.get("default"), "scores": scores, "best": choice.get("best")}


def geometries_view(doc: SeriesBench) -> dict[str, Any]:
    """The view of a ``--model`` run (``doc.geometries`` set)."""
    geos = [geometry_view(g) for g in doc.geometries or []]
    rows = [r for g in geos for r in g["rows"] if r["regime"] == (doc.decides or r["regime"])]
    decided = [(g, r) for g in doc.geometries or [] for r in g.rows if r.regime == (doc.decides or r.regime)]
    extra = sorted({k for _, r in decided for k in r.ratio if k.startswith(f"{Kernel.TMA}_")})
    verified = doc.verified or {}
    return {
        "doc": doc, "args": doc.args, "tma_ring": doc.tma_ring, "geometries": geos,
        "measured": [g for g in geos if g["rows"]], "skipped": [g for g in geos if not g["rows"]],
        "decides": doc.decides, "counts": verdict_counts(rows), **slower_view(rows),
        # each further ring the run timed (--rings), against upstream as tma is
        "by_ring": {k[len(Kernel.TMA) + 1 :]: slower_view([geometry_row(g, r, k) for g, r in decided]) for k in extra},
        "auto": auto_summary(geos),
        "rings": ring_view(ring_choice(doc.to_doc())), "series": (doc.provenance or {}).get("series_hash"),
        "machine": machine_line({**(doc.machine or {}), **(doc.provenance or {})}),
        "replays": verified.get("replays"), "copies": verified.get("copies"), "wrong": len(doc.failures),
        "errors": doc.errors or [],
    }


def first_geometry_ratios(view: dict[str, Any] | None) -> dict[int, Comparison]:
    """{n: Comparison} of tma against upstream's default kernel in the decode regime of the run's first geometry
    (the default one: what a run of another ``--model`` run of the same tree compares with); {} without a view."""
    geos = (view or {}).get("measured")
    return {r["n"]: r["ratio"] for r in geos[0]["rows"] if r["regime"] == "decode"} if geos else {}
