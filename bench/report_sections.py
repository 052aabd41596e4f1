"""Report sections of the upstream benchmark, the decode-step breakdown and PDL A/B, and the two-GPU run.

Each function takes one result document (``upstream_bench``, ``step_pdl``, ``contention``; see
``gpukit.schema``) and returns Markdown lines; ``bench/report.py`` places them in REPORT.md and
PR.md. Every figure is read from the document; the sentences only compare figures to each other.
"""

from __future__ import annotations

from typing import Any


def f(x: Any, digits: int = 2, unit: str = "") -> str:
    """A figure for a page: thousands separated, ``digits`` decimals, "–" when missing."""
    if x is None:
        return "–"
    if isinstance(x, int) and not digits:
        return f"{x:,}{unit}"
    return f"{x:,.{digits}f}{unit}"


def table(header: list[str], rows: list[list[str]]) -> str:
    """A Markdown table, the first column left-aligned and the rest right-aligned."""
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(header))) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return "\n".join(lines)


def _cell(ratio: float | None, v: str | None) -> str:
    if ratio is None:
        return "–"
    return f"{ratio:.3f} ({'**' + v + '**' if v in ('faster', 'slower') else v})"


def _provenance(doc: dict[str, Any]) -> str:
    p = doc.get("provenance") or {}
    tree = (p.get("tree") or "")[:12]
    return f"series `{p.get('series_hash')}`, tree `{tree}`" + (f" ({p['note']})" if p.get("note") else "")


# --------------------------------------------------------------------------- upstream benchmark


def upstream_bench_section(doc: dict[str, Any], *, heading: str = "###") -> list[str]:
    """The series' own benchmark: per-layer copy_missing of a real cache, every variant against upstream."""
    rows = doc.get("rows") or []
    if not rows:
        return []
    names = list(rows[0].get("ratio") or {})
    args = doc.get("args") or {}
    ce = doc.get("copy_engine_gbps") or []
    out = [
        f"{heading} The series' benchmark (`benchmarks/bench_decode_gather.py`)",
        "",
        f"`copy_missing` of a real OffloadMoeCache per layer, {args.get('layers')} layers per captured graph, "
        f"{args.get('quant_format')} experts of {f(doc.get('expert_bytes'), 0)} B, {args.get('rounds')} paired "
        f"alternating rounds; ratio = upstream (default grid) / variant, a tie is within the A/A spread. Copy engine "
        f"in the same run: {' / '.join(f(x, 1) for x in ce)} GB/s (start / end). "
        f"{sum(r.get('verified_sets', 0) for r in rows)} timed sets byte-verified, {len(doc.get('failures') or [])} wrong. "
        f"{_provenance(doc)}.",
        "",
    ]
    table_rows = []
    for r in rows:
        cells = [_cell((r.get("ratio") or {}).get(k), (r.get("verdict") or {}).get(k)) for k in names]
        gb = (r.get("gbps") or {}).get("tma")
        table_rows.append([str(r["n"]), f(r["median_us"]["upstream"]), "±" + f(r.get("aa_spread"), 3), *cells,
                           f(gb, 1)])  # fmt: skip
    out += [table(["n / layer", "upstream µs", "A/A", *names, "tma GB/s"], table_rows), ""]
    return out


# --------------------------------------------------------------------------- decode step and PDL


def _step_verdicts(s: dict[str, Any]) -> dict[str, tuple[float, str]]:
    return {k: (v, (s.get("verdict") or {}).get(k)) for k, v in (s.get("ratio") or {}).items()}


def pdl_sentence(doc: dict[str, Any]) -> str:
    """One sentence: what PDL did to the decode step, for each kernel, against the unset cache."""
    s = doc.get("decode_step") or {}
    v = _step_verdicts(s)
    if "tma_pdl" not in v:
        return ""
    tma, pdl, up = v.get("tma"), v["tma_pdl"], v.get("upstream_pdl")
    text = (f"Programmatic dependent launch made the captured decode step slower, not faster: tma with PDL "
            f"{pdl[0]:.3f} of unset ({pdl[1]}), tma without it {tma[0]:.3f} ({tma[1]})")  # fmt: skip
    if up:
        text += f", upstream's kernel with PDL {up[0]:.3f} ({up[1]})"
    text += f", against an A/A spread of ±{s.get('aa_spread', 0):.3f}; the series does not use PDL"
    return text + "."


def step_pdl_section(doc: dict[str, Any], *, heading: str = "###") -> list[str]:
    s = doc.get("decode_step") or {}
    if not s:
        return []
    med = s.get("median_us") or {}
    v = _step_verdicts(s)
    out = [
        f"{heading} Decode step: where the time goes, and programmatic dependent launch",
        "",
        f"The real OffloadMoeCache, {s.get('cache_slots')} slots, Zipf exponent {f(s.get('zipf_exponent'), 3)} "
        f"(modelled LRU miss rate {f(s.get('modelled_miss_rate'), 3)}; measured {f(s.get('misses_per_step'), 1)} "
        f"missed experts per step), one captured graph per cache, {s.get('rounds')} paired alternating rounds of "
        f"{s.get('per_block')} steps; every round all caches hold the same slot map and bytes, and at the end every "
        f"resident slot its source rows. `tma_pdl` and `upstream_pdl` are probes (the kernels rebuilt with "
        f"`griddepcontrol.wait` and launched with PDL), not part of the series. {_provenance(doc)}.",
        "",
    ]
    rows = [["unset", f(med.get("unset"), 1), "1 (base)"], ["unset_aa", f(med.get("unset_aa"), 1),
            f"A/A: ±{f(s.get('aa_spread'), 4)}"]]  # fmt: skip
    rows += [[k, f(med.get(k), 1), _cell(r, vv)] for k, (r, vv) in v.items()]
    out += [table(["variant", "µs / step", "unset / variant"], rows), ""]
    if pdl_sentence(doc):
        out += [pdl_sentence(doc), ""]
    b = s.get("breakdown") or {}
    if b:
        first = next(iter(b.values()))
        out += [
            f"Breakdown of {first.get('steps')} further replayed steps per variant (torch.profiler kernel "
            f"timestamps): per layer call, the ensure kernel's span, the gap from its end to the copy kernel's "
            f"start, and the copy kernel; mean µs per call (median in brackets) and the sum per step.",
            "",
        ]
        rows = []
        for name, x in b.items():
            if not x.get("calls"):
                continue
            mean, medn, per = x["mean_us"], x["median_us"], x["per_step_us"]
            rows.append([name, *(f"{mean[k]:.2f} ({medn[k]:.2f})" for k in ("ensure_us", "gap_us", "copy_us")),
                         *(f"{per[k]:.1f}" for k in ("ensure_us", "gap_us", "copy_us"))])  # fmt: skip
        out += [table(["variant", "ensure", "gap", "copy", "ensure / step", "gaps / step", "copies / step"], rows), ""]
        u = b.get("unset") or {}
        if u.get("calls"):
            per = u["per_step_us"]
            total = sum(per.values())
            out += [f"Where an unset step's time goes: the copy kernels {per['copy_us']:.0f} µs ({per['copy_us'] / total:.0%}), "
                    f"the ensure kernels {per['ensure_us']:.0f} µs ({per['ensure_us'] / total:.0%}) and the gaps between "
                    f"them {per['gap_us']:.0f} µs ({per['gap_us'] / total:.0%}) of the {total:.0f} µs these kernels span. "
                    "A per-layer gain of the copy kernel thus reaches the step diluted by the ensure share, and only on "
                    "layers with misses; on the many layers with no or one miss the two kernels tie (the per-layer "
                    "tables), so a ~1% faster gather at 2-32 misses is below what the step's A/A control can "
                    "resolve.", ""]  # fmt: skip
        if "unset" in b and "tma_pdl" in b and b["unset"].get("calls") and b["tma_pdl"].get("calls"):
            g0, g1 = b["unset"]["mean_us"]["gap_us"], b["tma_pdl"]["mean_us"]["gap_us"]
            out += [f"The PDL launch lengthens the ensure -> copy gap from {g0:.2f} to {g1:.2f} µs per layer call: "
                    f"flashlib's `_lru_ensure_kernel` never triggers `griddepcontrol.launch_dependents`, so the "
                    f"dependent copy can start only when it exits, and the programmatic edge costs more than the "
                    f"ordinary one. Where the previous kernel does trigger early (the per-layer graphs below, one "
                    f"copy after another) PDL does win.", ""]  # fmt: skip
    per = doc.get("per_layer") or {}
    if per:
        names = list(next(iter(per.values())).get("ratio") or {})
        rows = []
        for n, r in per.items():
            rows.append([n, f(r["median_us"]["unset"]), "±" + f(r.get("aa_spread"), 3),
                         *(_cell(r["ratio"][k], r["verdict"][k]) for k in names)])  # fmt: skip
        out += [
            "Per layer (`copy_missing` alone, 40 layers per graph, the same variants; every set verified):",
            "",
            table(["n / layer", "unset µs", "A/A", *names], rows),
            "",
        ]
    return out


# --------------------------------------------------------------------------- two GPUs


def contention_section(doc: dict[str, Any], *, heading: str = "###") -> list[str]:
    rows = doc.get("summary") or []
    if not rows:
        return []
    gpus = doc.get("gpus") or {}
    numa = "; ".join(f"GPU{k}: NUMA node {g.get('gpu_numa_node')}, bank pages {g.get('banks_numa_pages')}"
                     for k, g in sorted(gpus.items()))  # fmt: skip
    args = doc.get("args") or {}
    out = [
        f"{heading} Two GPUs gathering at once",
        "",
        f"One process per GPU, each with its own pinned NVFP4 banks and real OffloadMoeCache, a captured "
        f"{args.get('layers')}-layer `copy_missing` graph; per round each GPU alone, then both started together at a "
        f"barrier; {args.get('rounds')} rounds, medians; {len(doc.get('rows') or [])} timed sets byte-verified, "
        f"{doc.get('wrong_sets')} wrong. Host memory: {numa}. {_provenance(doc)}.",
        "",
    ]
    out += [table(["n / layer", "kernel", "GPU", "solo GB/s", "both GB/s", "kept"],
                  [[str(r["n"]), r["kernel"], str(r["rank"]), f(r["solo_gbps"], 1), f(r["both_gbps"], 1),
                    f(r["kept"], 3)] for r in rows])]  # fmt: skip
    out += ["", contention_sentence(doc).capitalize(), ""]
    return out


def contention_sentence(doc: dict[str, Any]) -> str:
    rows = doc.get("summary") or []
    kept = {k: [r["kept"] for r in rows if r["kernel"] == k] for k in ("upstream", "tma")}
    if not kept["tma"]:
        return ""
    return (f"each GPU keeps {min(kept['tma']):.3f}-{max(kept['tma']):.3f} of its solo rate with tma and "
            f"{min(kept['upstream']):.3f}-{max(kept['upstream']):.3f} with upstream's kernel when both gather at once.")

