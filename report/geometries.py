"""The series' benchmark run over several model geometries (``--model``, the benchmark's schema ``/2``): one
table over every geometry (tma against upstream per n, what ``auto`` chose), the lines the pull-request
texts carry for it (verdict counts, auto's choices), the ring sweep's choice its writer stored, and the benchmark's own
``--markdown`` comment beside the JSON (pasted into REPORT.md as an example)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from suite.kernels import Kernel
from suite.models import SeriesBench, SeriesGeometry
from suite.stats import Comparison
from report import words

#: auto's INFO line: "speed vs <default>: <candidate> <x>x, ...; A/A bar <x>x"
_SPEEDS = re.compile(r"speed vs (?P<base>\S+): (?P<speeds>[^;]*); A/A bar (?P<bar>[0-9.]+)x")
_SPEED = re.compile(r"(?P<name>.+?) (?P<x>[0-9.]+)x$")


def auto_speeds(line: str | None) -> dict[str, Any] | None:
    """``{"base", "speeds": {candidate: x}, "bar"}`` of auto's INFO line (the candidates' speed against the
    default and the probe's A/A bar); None where the line has none (e.g. no probe timed)."""
    m = _SPEEDS.search(line or "")
    if not m:
        return None
    speeds = {s["name"]: float(s["x"]) for part in m["speeds"].split(", ") if (s := _SPEED.match(part.strip()))}
    return {"base": m["base"], "speeds": speeds, "bar": float(m["bar"])}


def geometry_row(g: SeriesGeometry, r: Any) -> dict[str, Any]:
    return {"model": g.model, "n": r.n, "regime": r.regime, "upstream_us": r.median_us.get(Kernel.UPSTREAM),
            "gbps": r.gbps.get(Kernel.UPSTREAM), "ratio": r.ratio.get(Kernel.TMA) or Comparison(),
            "verified": r.verified}  # fmt: skip


def geometry_view(g: SeriesGeometry) -> dict[str, Any]:
    auto = g.auto or {}
    return {"model": g.model, "quant_format": g.quant_format, "expert_bytes": g.expert_bytes, "skipped": g.skipped,
            "rows": [geometry_row(g, r) for r in sorted(g.rows, key=lambda r: (r.regime, r.n))],
            "chose": auto.get("chose"), "default": auto.get("default"), "auto_line": auto.get("line"),
            "layers": g.extra.get("graph_layers"), "probe_ms": auto.get("probe_ms"), "load_ms": auto.get("load_ms"),
            "bar": auto.get("bar"),
            "speeds": ({"base": auto["default"], "speeds": auto["speed"], "bar": auto["bar"]} if auto.get("speed")
                       else None) if "speed" in auto else auto_speeds(auto.get("line"))}  # fmt: skip


def verdict_counts(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per n: ``{"n", "rows", "counts": {verdict: how many}, "slower": [the slower rows]}``, n ascending."""
    out = []
    for n in sorted({r["n"] for r in rows}):
        sel = [r for r in rows if r["n"] == n]
        counts = {v: sum(r["ratio"].verdict == v for r in sel) for v in words.VERDICTS}
        out.append({"n": n, "rows": len(sel), "counts": {v: c for v, c in counts.items() if c},
                    "slower": [r for r in sel if r["ratio"].verdict == "slower"]})  # fmt: skip
    return out


def _best_speed(geos: list[dict[str, Any]], prefix: str = "") -> dict[str, Any] | None:
    """The fastest candidate (its name starting with ``prefix``) any probe timed against its default:
    ``{"x", "name", "model", "bar"}`` (that probe's A/A bar)."""
    timed = [{"x": x, "name": name, "model": g["model"], "bar": g["speeds"]["bar"]} for g in geos
             for name, x in ((g["speeds"] or {}).get("speeds") or {}).items() if name.startswith(prefix)]  # fmt: skip
    return max(timed, key=lambda b: b["x"], default=None)


def auto_summary(geos: list[dict[str, Any]]) -> dict[str, Any] | None:
    """What auto chose over the geometries: how many kept their default, the others by name, and the
    best speed any candidate (and any tma ring) reached against its default, with that probe's A/A bar."""
    probed = [g for g in geos if g["chose"]]
    if not probed:
        return None
    kept = [g for g in probed if g["chose"] == g["default"]]
    return {"geometries": len(probed), "kept": len(kept), "defaults": sorted({g["default"] for g in kept}),
            "other": [{"model": g["model"], "chose": g["chose"], "default": g["default"]} for g in probed
                      if g["chose"] != g["default"]],
            "best": _best_speed(probed), "best_tma": _best_speed(probed, Kernel.TMA)}  # fmt: skip


def ring_view(choice: dict[str, Any] | None) -> dict[str, Any] | None:
    """The ring sweep's scores and its choice (``best``: the ring to export; None: leave the ring unset)."""
    if not choice or not choice.get("scores"):
        return None
    scores = [{"ring": k, **s} for k, s in choice["scores"].items()]
    return {"default": choice.get("default"), "scores": scores, "best": choice.get("best")}


def geometries_view(doc: SeriesBench) -> dict[str, Any]:
    """The view of a ``--model`` run (``doc.geometries`` set)."""
    geos = [geometry_view(g) for g in doc.geometries or []]
    rows = [r for g in geos for r in g["rows"] if r["regime"] == (doc.decides or r["regime"])]
    slower = [r for r in rows if r["ratio"].verdict == "slower"]
    verified = doc.verified or {}
    return {
        "doc": doc, "args": doc.args, "tma_ring": doc.tma_ring, "geometries": geos,
        "measured": [g for g in geos if g["rows"]], "skipped": [g for g in geos if not g["rows"]],
        "decides": doc.decides,
        "counts": verdict_counts(rows), "slower": slower, "slower_ns": sorted({r["n"] for r in slower}),
        "rows_total": len(rows), "auto": auto_summary(geos),
        "rings": ring_view(doc.ring_choice),
        "replays": verified.get("replays"), "copies": verified.get("copies"), "wrong": len(doc.failures),
        "errors": doc.errors or [],
        "losses": [{"n": r["n"], "ratio": r["ratio"], "where": f"the series' benchmark, {r['model']}"} for r in slower],
    }


def first_geometry_ratios(view: dict[str, Any] | None) -> dict[int, Comparison]:
    """{n: Comparison} of tma against upstream's default kernel in the decode regime of the run's first geometry
    (the default one: what a run of another ``--model`` run of the same tree compares with); {} without a view."""
    geos = (view or {}).get("measured")
    return {r["n"]: r["ratio"] for r in geos[0]["rows"] if r["regime"] == "decode"} if geos else {}


def pasted_markdown(path: Path, generated_at: str | None = None) -> dict[str, Any] | None:
    """The benchmark's ``--markdown`` comment beside its JSON: its provenance (the first line, an HTML
    comment), whether that names the JSON's run (``generated_at``), and the rest as written; None where
    there is no such file."""
    if not path.is_file():
        return None
    text = path.read_text()
    first, _, rest = text.partition("\n")
    m = re.fullmatch(r"<!--\s*(.*?)\s*-->", first.strip())
    provenance = m[1] if m else None
    return {"provenance": provenance, "text": (rest if m else text).strip("\n"), "file": path.name,
            "same_run": bool(provenance and generated_at and generated_at in provenance)}  # fmt: skip
