"""The report's model: the result documents (:mod:`suite.results`) turned into what the templates lay out.

Nothing here writes Markdown. Each ``*_view`` takes one document (or a device's documents) and
returns plain dicts of figures; every word that states a conclusion comes from :mod:`report.words`.
Gather rows may carry a ``regime`` (``decode`` or ``replay``; without one a row is ``replay``): the
decode regime's tables come first and its rows make the headline when there are any.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Mapping

from freetoken_overlay.series import series_hash
from suite import results
from gpukit.decode_regime import REGIMES, SPLIT_REGIMES, TOUCH_REGIMES  # table order; a row without a regime is "replay"
from gpukit.geometry import Ring
from gpukit.machine import machine_line
from suite.stats import median, verdict
from report import words
from report.series import commit_adding, series_commits, series_footprint

#: The proposal's targets the rows are checked against.
TARGETS = {"parity": 1.0, "ideal_slack": 1.10, "ideal_from_n": 4, "small_ns": (1, 2), "small_n_ratio": 1.05}
KNEE_SHARE = 0.97  # the open question's "knee": the fewest bytes in flight within this share of the best ring

Doc = Mapping[str, Any]


def regime(row: Doc) -> str:
    return row.get("regime") or "replay"


#: every regime a row or probe may carry, in table order
REGIME_ORDER = REGIMES + SPLIT_REGIMES + tuple(TOUCH_REGIMES)


def regime_key(name: str) -> int:
    return REGIME_ORDER.index(name) if name in REGIME_ORDER else len(REGIME_ORDER)


# --------------------------------------------------------------------------- per-layer gather (bench.json)


def gather_row(r: Doc) -> dict[str, Any]:
    us = r.get("us") or {}
    return {
        "regime": regime(r),
        "layers": r["layers"],
        "n": r["n"],
        "bytes": r.get("bytes_per_layer") or 0,
        "us": us,
        "ratio": r.get("speedup"),
        "spread": r.get("aa_spread"),
        "verdict": verdict(r.get("speedup"), r.get("aa_spread")),
        "gbps": (r.get("gbps") or {}).get("ours"),
        "pct": (r.get("pct_of_ceiling") or {}).get("ours"),
        # bytes at the copy-engine ceiling of the same run
        "ideal": (r.get("bytes_per_layer") or 0) / (r["ceiling_gbps"] * 1e9) * 1e6 if r.get("ceiling_gbps") else None,
        "ceiling_gbps": r.get("ceiling_gbps"),
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


def gather_view(bench: Doc | None) -> dict[str, Any] | None:
    rows = [gather_row(r) for r in (bench or {}).get("gather") or []]
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
                "copy_engine": any("copy_engine" in r["us"] for r in sel),
            }
        )
    regimes = sorted({r["regime"] for r in rows}, key=regime_key)
    mains = [{"regime": reg, "rows": main_rows([r for r in rows if r["regime"] == reg])} for reg in regimes]
    head, main = regimes[0], mains[0]["rows"]
    kernel = bench.get("kernel") or {}
    ring = kernel.get("decode_gather_default_ring") or {}
    ceiling = bench.get("ceiling") or {}
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
        "upstream": kernel.get("upstream") or {},
        "bytes_per_expert": (bench.get("geometry") or {}).get("bytes_per_expert"),
        "rounds": (bench.get("method") or {}).get("rounds"),
        "ceiling_start": ceiling.get("start") or {},
        "ceiling_end": ceiling.get("end") or {},
        "verified": bench.get("verified") or {},
    }


def decode_step_view(bench: Doc | None) -> dict[str, Any] | None:
    d = (bench or {}).get("decode_step")
    if not d:
        return None
    r = d.get("rounds_us") or {}
    pairs = [u / t for u, t in zip(r.get("unset") or [], r.get("tma") or []) if t]
    lo, hi = (min(pairs), max(pairs)) if pairs else (None, None)
    return {
        **d,
        "us": d.get("us_per_step") or {},
        "ratio": d.get("speedup"),
        "spread": d.get("aa_spread"),
        "verdict": verdict(d.get("speedup"), d.get("aa_spread")),
        "within": words.within(d.get("speedup"), d.get("aa_spread")),
        "pairs": {"lo": lo, "hi": hi, "count": len(pairs), "resolved": words.resolved(lo, hi)} if pairs else None,
    }


# --------------------------------------------------------------------------- ceiling sweep


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
        "best": [{"label": label, **s[key]} for key, label in SWEEP_PATHS if s.get(key)],
        "skipped": len(doc.get("skipped") or []),
        "synthetic": bool(doc.get("synthetic")),
        "png": png,
        "command": doc.get("command"),
        "best_sm_gbps": max(sm) if sm else None,
        "knee": knee(doc, default_ring),
    }


def knee(doc: Doc, default_ring: Ring | None) -> dict[str, Any] | None:
    """The fewest ring bytes in flight within :data:`KNEE_SHARE` of the best ring (NVFP4 gather), where
    the default ring sits against it, and how far the rings past it fall below the best."""
    rings = [r for r in doc.get("ring") or [] if r.get("gather_gbps")]
    if not rings:
        return None
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


# --------------------------------------------------------------------------- the other benchmarks


def upstream_bench_view(doc: Doc | None) -> dict[str, Any] | None:
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
    u = b.get("unset")
    if u:
        per = u["per_step_us"]
        total = sum(per.values())
        out["shares"] = {"total": total, **{k: {"us": v, "share": v / total} for k, v in per.items()}}
        out["dilution"] = dilution(per["copy_us"] / total, gather, spread, s.get("misses_per_step"))
    if u and b.get("tma_pdl"):
        g0, g1 = u["mean_us"]["gap_us"], b["tma_pdl"]["mean_us"]["gap_us"]
        out["gap"] = {"before": g0, "after": g1, "change": words.change(g0, g1)}
    per_layer = doc.get("per_layer") or {}
    if per_layer:
        names = list(next(iter(per_layer.values())).get("ratio") or {})
        rows = [
            {
                "n": n,
                "unset_us": r["median_us"]["unset"],
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


# --------------------------------------------------------------------------- targets


def targets_view(gather: dict[str, Any] | None, ceiling: dict[str, Any] | None) -> dict[str, Any] | None:
    """The proposal's targets checked against the headline rows (each the largest graph at its n)."""
    main = (gather or {}).get("main") or []
    if not main:
        return None
    t = TARGETS
    by_n = {r["n"]: r for r in main}
    below = [r for r in main if (r["ratio"] or 0) < t["parity"]]
    ideal = [
        {"n": r["n"], "x": r["us"]["ours"] / r["ideal"]}
        for r in main
        if r["n"] >= t["ideal_from_n"] and r["us"].get("ours") and r["ideal"]
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
            o0, o1, o2, u1 = r0["us"]["ours"], r1["us"]["ours"], r2["us"]["ours"], r1["us"]["upstream"]
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


# --------------------------------------------------------------------------- devices and pages


def machine_of(docs: Mapping[str, Doc]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The first document's machine, and its provenance (older files carry the series in the machine)."""
    for doc in docs.values():
        if doc.get("machine"):
            return doc["machine"], doc.get("provenance") or {}
    return {}, {}


def touch_recovery(n: int, iv: dict[str, Any]) -> list[dict[str, Any]]:
    """Per kernel of an interleaved probe (``interleaved`` of one miss count): the fresh rows' cost (median
    µs per layer, decode - replay) and the share of it each touch regime takes back
    ((decode - touched) / (decode - replay))."""
    med = {lab: median(v) for lab, v in iv["rounds_us"].items() if v}
    touches = [r for r in iv["regimes"] if r in TOUCH_REGIMES]
    out = []
    for k in iv["kernels"]:
        dec, rep = med.get(f"{k}@decode"), med.get(f"{k}@replay")
        if k == "upAA" or dec is None or rep is None or not touches or dec <= rep:
            continue
        shares = {r: (dec - med[f"{k}@{r}"]) / (dec - rep) for r in touches if f"{k}@{r}" in med}
        out.append({"n": n, "kernel": k, "gap_us": dec - rep, "shares": shares})
    return out


def regime_probe_view(base: Path, slug: str) -> dict[str, Any] | None:
    """The decode-regime probes (``<device>/probes/probe_*.json`` of ``bench.probes.probe_fresh``): per
    miss count and regime, every kernel variant's paired ratio to upstream with its verdict against the
    run's A/A spread; rows in numeric order, decode before replay."""
    runs = []
    for path in sorted((base / slug / "probes").glob("probe_*.json")):
        doc = results.read_json(path) or {}
        rows, rounds, recovered, interleaved = [], set(), [], False

        def add_row(n: str, reg: str, spread: float, summaries: Mapping[str, Any]) -> None:
            cells = [{"name": k, "ratio": s["speedup_paired"], "verdict": verdict(s["speedup_paired"], spread)}
                     for k, s in summaries.items()]  # fmt: skip
            rows.append({"n": int(n), "regime": reg, "aa_spread": spread, "cells": cells})

        for n, entry in (doc.get("per_n") or {}).items():
            iv = entry.get("interleaved")
            if iv:  # every kernel@regime in the same rounds, each against up@decode
                interleaved = True
                rounds.update(len(v) for v in iv["rounds_us"].values())
                recovered += touch_recovery(int(n), iv)
                for reg in iv["regimes"]:
                    summ = {k: iv["summary"][f"{k}@{reg}"] for k in iv["kernels"] if k != "upAA" and f"{k}@{reg}" in iv["summary"]}
                    add_row(n, reg, iv["summary"]["up@decode"]["aa_spread"], summ)
            for reg in sorted((k for k in entry if k in REGIME_ORDER), key=regime_key):
                rounds.update(len(v) for v in (entry[reg].get("rounds_us") or {}).values())
                summ = entry[reg]["summary"]
                add_row(n, reg, next(iter(summ.values()))["aa_spread"], summ)
        if rows:
            rows.sort(key=lambda r: (regime_key(r["regime"]), r["n"]))
            runs.append({
                "file": f"{slug}/probes/{path.name}",
                "series": (doc.get("provenance") or {}).get("series_hash") or doc.get("series_hash"),
                "footprint": doc.get("footprint"),
                "pages": words.PAGE_WORDS.get((doc.get("bank_pages") or {}).get("backing")),
                "variants": [c["name"] for c in rows[0]["cells"]],
                "rounds": "/".join(str(r) for r in sorted(rounds)),
                "interleaved": interleaved,
                "recovered": recovered,
                "rows": rows,
                "step": doc.get("step"),
            })  # fmt: skip
    return {"runs": runs} if runs else None


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


def decode_ratios(gather: dict[str, Any] | None, ubench: dict[str, Any] | None) -> dict[int, dict[str, Any]]:
    """{n: {ratio, spread, verdict}} of decode_gather against upstream's default kernel in the decode
    regime of one run: a :func:`gather_view` (the largest graph per n) or else an
    :func:`upstream_bench_view` (its ``tma`` column)."""
    if gather:
        rows = [r for r in gather["all_rows"] if r["regime"] == "decode"]
        return {r["n"]: {"ratio": r["ratio"], "spread": r["spread"], "verdict": r["verdict"]} for r in main_rows(rows)}
    if not ubench or "tma" not in ubench["names"]:
        return {}
    i = ubench["names"].index("tma")
    return {r["n"]: {"ratio": r["cells"][i]["ratio"], "spread": r["spread"], "verdict": r["cells"][i]["verdict"]}
            for r in ubench["rows"] if r["regime"] == "decode"}  # fmt: skip


#: The runs a repeat table compares, with the words the report uses for them.
REPEAT_KINDS = {"bench": "the project benchmark", "upstream_bench": "the series' benchmark"}


def current_ratios(gather: dict[str, Any] | None, ubench: dict[str, Any] | None) -> dict[str, dict[int, Any]]:
    """{kind: :func:`decode_ratios`} of a device's current project and series benchmark runs."""
    return {"bench": decode_ratios(gather, None), "upstream_bench": decode_ratios(None, ubench)}


#: {kind: (its view, which decode_ratios reads)} of the runs a repeat table compares.
REPEAT_VIEWS = {"bench": lambda d: decode_ratios(gather_view(d), None),
                "upstream_bench": lambda d: decode_ratios(None, upstream_bench_view(d))}  # fmt: skip


def repeats_view(
    base: Path, slug: str, docs: Mapping[str, Doc], current: Mapping[str, dict[int, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Per benchmark: the current run (``current``: {kind: its :func:`decode_ratios`}) beside every
    earlier run of the SAME patched tree kept in ``<device>/history/runs/`` (same schema), decode regime,
    so run-to-run variation of the verdicts is on the page. Earlier runs in ``generated_at`` order."""
    out = []
    for kind, where in REPEAT_KINDS.items():
        doc = docs.get(kind)
        tree = ((doc or {}).get("provenance") or {}).get("tree")
        if not doc or not tree:
            continue
        earlier = []
        for path in sorted((base / slug / "history" / "runs").glob("*.json")):
            old = results.read_json(path) or {}
            if (old.get("schema") == doc.get("schema") and (old.get("provenance") or {}).get("tree") == tree
                    and old.get("generated_at") != doc.get("generated_at")):  # fmt: skip
                earlier.append((old.get("generated_at") or "", f"{slug}/history/runs/{path.name}", old))
        if not earlier:
            continue
        runs = [{"file": f"{slug}/{results.KINDS[kind].file}", "at": doc.get("generated_at"), "ratios": current[kind]}]
        runs += [{"file": f, "at": at, "ratios": REPEAT_VIEWS[kind](old)} for at, f, old in sorted(earlier)]
        ns = sorted({n for r in runs for n in r["ratios"]})
        out.append({"kind": kind, "where": where, "tree": tree, "runs": runs, "ns": ns,
                    "header": ["run", "generated (UTC)"] + [f"n = {n}" for n in ns]})  # fmt: skip
    return out


def decode_losses(
    current: Mapping[str, dict[int, dict[str, Any]]], repeats: list[dict[str, Any]] | None = None
) -> list[dict[str, Any]]:
    """Every decode-regime figure where decode_gather is slower beyond its run's A/A spread: in the
    current runs (``current``: {kind: :func:`decode_ratios`}; the project benchmark's per-layer rows,
    the series' benchmark's ``tma`` column) and in the earlier runs of the same tree in ``repeats``
    (:func:`repeats_view`)."""
    out = []
    for kind, where in REPEAT_KINDS.items():
        out += [{"n": n, "ratio": c["ratio"], "spread": c["spread"], "where": where}
                for n, c in sorted(current.get(kind, {}).items()) if c["verdict"] == "slower"]  # fmt: skip
    for rep in repeats or []:
        for run in rep["runs"][1:]:
            for n, c in sorted(run["ratios"].items()):
                if c["verdict"] == "slower":
                    out.append({"n": n, "ratio": c["ratio"], "spread": c["spread"],
                                "where": f"an earlier run of {rep['where']} on the same tree (`{run['file']}`)"})  # fmt: skip
    return out


def device_view(slug: str, base: Path) -> dict[str, Any]:
    docs = results.load_device(slug, base)
    machine, prov = machine_of(docs)
    name = machine.get("device_name") or slug
    gpus = results.KINDS["contention"].gpus
    gather = gather_view(docs.get("bench"))
    png = base / slug / "ceiling.png"
    ceiling = ceiling_view(
        docs.get("ceiling"), f"{slug}/ceiling.png" if png.is_file() else None, (gather or {}).get("ring")
    )
    bench_prov = (docs.get("bench") or {}).get("provenance") or {}
    ubench = upstream_bench_view(docs.get("upstream_bench"))
    current = current_ratios(gather, ubench)
    repeats = repeats_view(base, slug, docs, current)
    return {
        "slug": slug,
        "name": f"{gpus} x {name}" if slug.endswith(f"x{gpus}") else name,
        "machine": machine_line({**machine, **{k: v for k, v in prov.items() if v}}),
        "link": machine.get("pcie_gen_under_load") or machine.get("pcie_gen_current"),
        "series": bench_prov.get("series_hash") or machine.get("series_hash"),
        "readme": (base / slug / "README.md").is_file(),
        "history": (base / slug / "history" / "README.md").is_file(),
        "gather": gather,
        "step": decode_step_view(docs.get("bench")),
        "ceiling": ceiling,
        "upstream_bench": ubench,
        "step_pdl": step_pdl_view(docs.get("step_pdl"), gather),
        "contention": contention_view(docs.get("contention")),
        "conformance": conformance_view(docs.get("conformance")),
        "sanitizer": sanitizer_view(docs.get("sanitizer")),
        "targets": targets_view(gather, ceiling),
        "regime_probes": regime_probe_view(base, slug),
        "e2e": e2e_view(docs.get("e2e")),
        "repeats": repeats,
        "losses": decode_losses(current, repeats),
    }


def context(base: Path) -> dict[str, Any]:
    """Everything the templates read, from the documents under ``base`` (a ``results/`` directory)."""
    devices = [device_view(slug, base) for slug in results.devices(base)]
    commits = series_commits()
    return {
        "devices": devices,
        "measured": [d for d in devices if d["gather"]],
        "sass": sass_view(results.load("sass", base=base)),
        "commits": commits,
        "sass_test": commit_adding(commits, "tests/kernels/test_bulk_copy_sass.py"),
        "footprint": series_footprint(),
        "series_hash": series_hash(),
    }
