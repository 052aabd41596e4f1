"""Render results/ into results/README.md (the entry page), results/REPORT.md and results/PR.md.

    python -m bench.report                      # or: nox -s report
    python -m bench.report --results DIR --out DIR

Every figure is read from the result documents (``gpukit.schema``: bench, ceiling, conformance,
sanitizer, sass, upstream_bench, step_pdl, contention); the documents' layout is in the jinja2
templates ``bench/templates/*.md.j2``,
the commands they print come from ``gpukit.commands``. This module turns documents into the
tables and sentences the templates place. Long (~700 lines) because each table and sentence of
the three pages is built here from optional fields of the older document kinds; the sections of
the newer kinds (upstream_bench, step_pdl, contention) live in ``bench/report_sections.py``.

A speedup is upstream/ours (> 1: ours faster) and is called a tie when |speedup - 1| is within the
A/A spread measured in the same run (upstream against a second capture of itself).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import jinja2

from bench.report_sections import (
    contention_section,
    contention_sentence,
    f,
    step_pdl_section,
    table,
    upstream_bench_section,
)
from gpukit import commands
from gpukit.geometry import fmt_bytes
from gpukit.machine import machine_line
from gpukit.schema import RESULTS, load, load_device

TEMPLATES = Path(__file__).resolve().parent / "templates"
PAGES = {"README.md": "README.md.j2", "REPORT.md": "REPORT.md.j2", "PR.md": "PR.md.j2"}

NOT_MEASURED = [
    (
        "Consumer Blackwell (sm_120)",
        "the `.shared::cluster` stack-limit hazard the kernel avoids was found there; the resource guard ran only on the "
        "device(s) above, so the sm_120 claim rests on the design, not on a run here",
    ),
    (
        "WSL2 / Windows (WDDM)",
        "pinned memory maps to a different device address there (freetoken's `device_ptr`); no run under WSL2 or WDDM",
    ),
    (
        "NVLink-C2C (GH200 / GB200)",
        "a coherent host link several times faster than PCIe needs far more bytes in flight; no "
        "Grace-Hopper/Grace-Blackwell run, so there `tma` warns and keeps fast_index_copy_multi unless "
        "FREETOKEN_DECODE_GATHER_RING is set (run the benchmark with `--ring` to choose one)",
    ),
    (
        "Other PCIe hosts",
        "the ring's bandwidth depends on the link's bandwidth-delay product; only the host(s) above were measured",
    ),
    ("End-to-end tokens/s", "these runs time the copy and the decode step's copy path, not a full model decode"),
]


# ---------------------------------------------------------------------------
# Loading
# ---------------------------------------------------------------------------


def load_results(results: Path) -> dict[str, dict[str, Any]]:
    """{device slug: {bench, ceiling, summary, sanitizer, png}} for every results/<device>/ with data."""
    out: dict[str, dict[str, Any]] = {}
    for d in sorted(p for p in results.iterdir() if p.is_dir()) if results.is_dir() else []:
        docs = load_device(results, d.name)
        entry = {
            "bench": docs.get("bench"),
            "ceiling": docs.get("ceiling"),
            "summary": docs.get("conformance"),
            "sanitizer": docs.get("sanitizer"),
            "upstream_bench": docs.get("upstream_bench"),
            "step_pdl": docs.get("step_pdl"),
            "contention": docs.get("contention"),
            "png": f"{d.name}/ceiling.png" if (d / "ceiling.png").exists() else None,
        }
        if any(entry[k] for k in DOC_KEYS):
            out[d.name] = entry
    return out


DOC_KEYS = ("bench", "ceiling", "summary", "sanitizer", "upstream_bench", "step_pdl", "contention")


def machine_of(entry: dict[str, Any]) -> dict[str, Any]:
    for key in DOC_KEYS:
        doc = entry.get(key)
        if doc and doc.get("machine"):
            return doc["machine"]
    return {}


# ---------------------------------------------------------------------------
# Formatting
# ---------------------------------------------------------------------------


def verdict_text(row: dict[str, Any]) -> str:
    v = row.get("verdict")
    s = row.get("speedup")
    if v == "tie":
        return "tie"
    if v in ("faster", "slower") and s is not None:
        return f"**{v}**"
    return v or "–"


def gather_rows(bench: dict[str, Any], layers: int | None = None) -> list[dict[str, Any]]:
    rows = bench.get("gather") or []
    return [r for r in rows if layers is None or r["layers"] == layers]


def layer_groups(bench: dict[str, Any]):
    """``(layers, rows)`` for each graph size in the run, the 40-layer graph first."""
    for layers in sorted({r["layers"] for r in gather_rows(bench)}, key=lambda x: (x != 40, x)):
        yield layers, gather_rows(bench, layers)


def default_ring_text(bench: dict[str, Any]) -> str:
    """The measured default ring as CTAs x stages x chunk, e.g. ``16x4x8 KiB``."""
    ring = (bench.get("kernel") or {}).get("decode_gather_default_ring") or {}
    return f"{ring.get('ctas')}x{ring.get('stages')}x{fmt_bytes(ring.get('chunk_bytes') or 0)}"


def gather_table(rows: list[dict[str, Any]], *, copy_engine: bool = True) -> str:
    header = [
        "n / layer",
        "bytes / layer",
        "upstream µs",
        "ours µs",
        "speedup (up/ours)",
        "A/A spread",
        "verdict",
        "ours GB/s",
        "% of ceiling",
        "ideal µs",
    ]
    if copy_engine:
        header.insert(4, "copy engine µs")
    out = []
    for r in rows:
        us = r.get("us") or {}
        cells = [
            str(r["n"]),
            fmt_bytes(r["bytes_per_layer"]) if r["bytes_per_layer"] else "0",
            f(us.get("upstream")),
            f(us.get("ours")),
            f(r.get("speedup"), 3),
            ("±" + f(r.get("aa_spread"), 3)) if r.get("aa_spread") is not None else "–",
            verdict_text(r),
            f((r.get("gbps") or {}).get("ours"), 1),
            f((r.get("pct_of_ceiling") or {}).get("ours"), 0, "%")
            if (r.get("pct_of_ceiling") or {}).get("ours")
            else "–",
            f(r.get("ideal_us")),
        ]
        if copy_engine:
            cells.insert(4, f(us.get("copy_engine")))
        out.append(cells)
    return table(header, out)


def verdict_counts(rows: list[dict[str, Any]]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for r in rows:
        out.setdefault(r.get("verdict") or "n/a", []).append(r["n"])
    return out


def verdict_sentence(rows: list[dict[str, Any]], layers: int) -> str:
    if not rows:
        return ""
    counts = verdict_counts(rows)
    parts = []
    for v, phrase in (("faster", "faster"), ("tie", "a tie"), ("slower", "slower"), ("n/a", "not comparable")):
        if v in counts:
            ns = ", ".join(str(n) for n in counts[v])
            parts.append(f"{phrase} at n = {ns}")
    spreads = [r["aa_spread"] for r in rows if r.get("aa_spread") is not None]
    spread = f" (A/A spread up to ±{max(spreads):.3f})" if spreads else ""
    return f"{layers}-layer graph: decode_gather is " + "; ".join(parts) + spread + "."


def ceiling_line(bench: dict[str, Any] | None, ceiling: dict[str, Any] | None) -> str:
    parts = []
    if bench and bench.get("ceiling"):
        c = bench["ceiling"]
        s, e = c.get("start") or {}, c.get("end") or {}
        parts.append(
            f"copy-engine ceiling in the benchmark run: {f(s.get('gbps'))} GB/s at the start, "
            f"{f(e.get('gbps'))} GB/s at the end ({fmt_bytes(s.get('bytes', 0))} pinned H2D, median of {s.get('reps', '–')})"
        )
    if ceiling and (ceiling.get("summary") or {}).get("copy_engine_gbps"):
        parts.append(f"sweep: {f(ceiling['summary']['copy_engine_gbps'])} GB/s (best copy-engine size)")
    return "; ".join(parts)


# ---------------------------------------------------------------------------
# REPORT.md
# ---------------------------------------------------------------------------


def decode_step_note(d: dict[str, Any]) -> str:
    """How to read the decode step's ratio: against its A/A control (a second unset cache, same rounds)
    when the run had one, else against the spread of its own paired per-round ratios."""
    r = d.get("rounds_us") or {}
    pairs = [u / t for u, t in zip(r.get("unset") or [], r.get("tma") or []) if t]
    if not pairs:
        return ""
    lo, hi = min(pairs), max(pairs)
    text = f"Paired per-round ratios (unset/tma) range {lo:.3f}-{hi:.3f} over {len(pairs)} rounds"
    if d.get("aa_spread") is not None:
        return (
            f"{text}; the A/A control (a second unset cache in the same rounds) spreads "
            f"±{d['aa_spread']:.3f}, so the median ratio {d.get('speedup'):.3f} is a {d.get('verdict')}."
        )
    resolved = "resolved" if lo > 1 or hi < 1 else "not resolved: the range spans 1.0"
    return f"{text} ({resolved}); this run had no A/A control, so read the median ratio against that range."


def sweep_bytes_in_flight(ceiling: dict[str, Any] | None, share: float = 0.97) -> str:
    """Open question 1, from the sweep: the fewest ring bytes in flight within ``share`` of the best ring."""
    rings = [r for r in (ceiling or {}).get("ring") or [] if r.get("gather_gbps")]
    if not rings:
        return ""
    gbps = lambda r: r["gather_gbps"]  # noqa: E731
    best = max(gbps(r) for r in rings)
    ok = sorted((r for r in rings if gbps(r) >= share * best), key=lambda r: r.get("bytes_in_flight") or 0)
    if not ok:
        return ""
    first = ok[0]
    return (
        f"the fewest ring bytes in flight within {share:.0%} of the best ring ({best:.1f} GB/s) were "
        f"{fmt_bytes(first.get('bytes_in_flight') or 0)} ({first.get('tag')}, {gbps(first):.1f} GB/s, NVFP4 gather); "
        "CTA count alone does not predict it (see the heatmap)"
    )


def device_section(e: dict[str, Any]) -> str:
    """REPORT.md's body for one device: gather tables, decode step, sweep, conformance, sanitizer."""
    out: list[str] = []
    bench = e.get("bench")
    if bench:
        up = (bench.get("kernel") or {}).get("upstream") or {}
        out += [
            "### Gather in a captured CUDA graph (time per layer)",
            "",
            f"decode_gather ring {default_ring_text(bench)} "
            f"(CTAs x stages x chunk) against upstream fast_index_copy_multi "
            f"{up.get('num_threads')} threads x {up.get('blocks_per_bank')} blocks per bank; "
            f"NVFP4 experts of {f((bench.get('geometry') or {}).get('bytes_per_expert'), 0)} B; "
            f"{(bench.get('method') or {}).get('rounds')} paired alternating rounds. "
            + ceiling_line(bench, e.get("ceiling"))
            + ".",
            "",
        ]
        for layers, rows in layer_groups(bench):
            out += [f"#### {layers}-layer graph", "", gather_table(rows), "", verdict_sentence(rows, layers), ""]
        ver = bench.get("verified") or {}
        out += [
            f"Every timed set was poisoned first and byte-verified after: {f(ver.get('timed_sets'), 0)} sets, "
            f"{fmt_bytes(ver.get('bytes') or 0)} verified.",
            "",
        ]
        d = bench.get("decode_step")
        if d:
            us = d.get("us_per_step") or {}
            out += [
                "### Decode step through OffloadMoeCache (captured, per step)",
                "",
                table(
                    [
                        "layers",
                        "slots",
                        "miss rate",
                        "misses / step",
                        "unset µs",
                        "tma µs",
                        "speedup (unset/tma)",
                        "A/A spread",
                        "verdict",
                        "ideal copy µs",
                    ],
                    [
                        [
                            str(d.get("layers")),
                            f(d.get("cache_slots"), 0),
                            f(d.get("miss_rate"), 3),
                            f(d.get("misses_per_step"), 2),
                            f(us.get("unset"), 1),
                            f(us.get("tma"), 1),
                            f(d.get("speedup"), 3),
                            ("±" + f(d["aa_spread"], 3)) if d.get("aa_spread") is not None else "–",
                            d.get("verdict") or "–",
                            f(d.get("ideal_copy_us_per_step"), 1),
                        ]
                    ],
                ),
                "",
                decode_step_note(d),
                "",
                f"Routing: Zipf exponent {f(d.get('zipf_exponent'), 3)} (modelled LRU miss rate "
                f"{f(d.get('modelled_miss_rate'), 3)}), top-{d.get('top_k')}, batch {d.get('batch')}, "
                f"{d.get('rounds')} rounds of {d.get('steps_per_round')} steps. {d.get('note', '')}",
                "",
            ]
    ce = e.get("ceiling")
    if ce:
        s = ce.get("summary") or {}
        rows = []
        for key, label in (
            ("best_ring_flat_gbps", "TMA ring, flat"),
            ("best_ring_gather_gbps", "TMA ring, NVFP4 gather"),
            ("best_ldg_flat_gbps", "LDG grid, flat"),
            ("best_ldg_gather_gbps", "LDG grid, NVFP4 gather"),
        ):
            b = s.get(key)
            if b:
                rows.append(
                    [
                        label,
                        b["config"],
                        fmt_bytes(b["bytes_in_flight"]),
                        f(b["gbps"]),
                        f(b.get("pct_of_copy_engine"), 0, "%"),
                    ]
                )
        out += [
            "### Ceiling sweep",
            "",
            f"Copy engine (best size): {f(s.get('copy_engine_gbps'))} GB/s.",
            "",
            table(["path", "best config", "bytes in flight", "GB/s", "% of copy engine"], rows),
            "",
        ]
        if ce.get("skipped"):
            out += [f"{len(ce['skipped'])} ring(s) skipped (shared-memory cap).", ""]
        if ce.get("synthetic"):
            out += ["**The sweep file is synthetic (`--dry-run`): not a measurement.**", ""]
        if e.get("png"):
            out += [f"![ceiling sweep]({e['png']})", ""]
        out += [f"Sweep command: `{ce.get('command') or commands.SWEEP.line}`", ""]
    out += extra_sections(e)
    out += conformance_section(e)
    return "\n".join(out)


def extra_sections(e: dict[str, Any], heading: str = "###") -> list[str]:
    """The series' benchmark, the decode-step breakdown and PDL A/B, and the two-GPU run (where measured)."""
    out: list[str] = []
    if e.get("upstream_bench"):
        out += upstream_bench_section(e["upstream_bench"], heading=heading)
    if e.get("step_pdl"):
        out += step_pdl_section(e["step_pdl"], heading=heading)
    if e.get("contention"):
        out += contention_section(e["contention"], heading=heading)
    return out


def conformance_section(e: dict[str, Any]) -> list[str]:
    out: list[str] = []
    s = e.get("summary")
    if s:
        t = s.get("totals") or {}
        tests = t.get("tests") or {}
        out += [
            "### Conformance (GPU tier)",
            "",
            f"{'PASSED' if s.get('passed') else 'NOT PASSED'}: {f(tests.get('passed', 0), 0)} passed, "
            f"{f(tests.get('failed', 0), 0)} failed, {f(tests.get('error', 0), 0)} errors, "
            f"{f(tests.get('skipped', 0), 0)} skipped; {f(t.get('verified_calls'), 0)} byte-verified decode_gather "
            f"calls moving {fmt_bytes(t.get('verified_bytes') or 0)} (plus {f(t.get('upstream_control_calls', 0), 0)} "
            f"upstream control calls), in {f(s.get('duration_s'), 0)} s.",
            "",
        ]
        rows = [
            [
                g,
                f(v.get("calls"), 0),
                fmt_bytes(v.get("bytes") or 0),
                ", ".join(f"{k} {n}" for k, n in sorted((v.get("tests") or {}).items())),
            ]
            for g, v in (s.get("groups") or {}).items()
        ]
        out += [table(["group", "verified calls", "bytes", "tests"], rows), ""]
        if s.get("failures"):
            out += ["Failures: " + ", ".join(f"`{x}`" for x in s["failures"]), ""]
    san = e.get("sanitizer")
    if san:
        rows = [
            [
                tool,
                f(r.get("errors"), 0) if r.get("errors") is not None else "no summary",
                f(r.get("warnings"), 0),
                "yes" if r.get("case_exact") else "no",
            ]
            for tool, r in (san.get("tools") or {}).items()
        ]
        out += [
            "### compute-sanitizer",
            "",
            f"{'PASSED' if san.get('passed') else 'NOT PASSED'} ({san.get('sanitizer_version') or 'compute-sanitizer'}):",
            "",
            table(["tool", "errors", "warnings", "copies exact"], rows),
            "",
        ]
    return out


def sass_section(results: Path) -> list[str]:
    """The compile-only SASS gate (``python -m conformance.sass --out results/sass.json``), if present."""
    doc = load(results / "sass.json")
    if not doc or not doc.get("reports"):
        return []
    rows = []
    for r in doc["reports"]:
        fns = r.get("functions") or []
        rows.append(
            [
                r.get("arch", "?"),
                "/".join(sorted({str(fn.get("registers")) for fn in fns})),
                str(r.get("max_stack_frame_bytes")),
                str(r.get("spill_bytes")),
                str(r.get("ldl_stl")),
                "yes" if r.get("has_ublkcp") else "no",
                str(len(r.get("call_abs_noinc") or [])),
            ]
        )
    nvcc = (doc["reports"][0].get("nvcc") or "").split(",")[-1].strip()
    return [
        "## SASS of the default ring (compile only, no GPU)",
        "",
        f"`{commands.SASS.nox}` (`{commands.SASS.line}`; {nvcc}; "
        "int32 and int64 index kernels):",
        "",
        table(["arch", "registers", "stack B", "spill B", "LDL/STL", "UBLKCP", "CALL.ABS.NOINC"], rows),
        "",
    ]


def best_sm_path_gbps(ceiling: dict[str, Any] | None) -> float | None:
    """The best NVFP4-gather bandwidth of any SM-driven path (TMA ring or LDG grid) in the sweep."""
    rows = [r for key in ("ring", "ldg") for r in (ceiling or {}).get(key) or []]
    vals = [r["gather_gbps"] for r in rows if r.get("gather_gbps")]
    return max(vals) if vals else None


def targets_section(data: dict[str, dict[str, Any]]) -> list[str]:
    """The tuning targets, checked against the measured rows: parity at every n (ties named as ties),
    within 10% of the ideal for n >= 4, and >= 1.05 at n = 1 and 2 with the fixed-cost arithmetic
    that bounds it."""
    out = ["## Targets", ""]
    for slug, e in data.items():
        bench = e.get("bench")
        if not bench:
            continue
        rows = {r["n"]: r for r in gather_rows(bench) if r.get("layers") == 40 or r.get("n", 0) > 32}
        if not rows:
            continue
        name = machine_of(e).get("device_name") or slug
        out += [f"{name}, 40-layer graph (n = 600: {rows[max(rows)].get('layers')} layers):", ""]
        below = [n for n, r in sorted(rows.items()) if (r.get("speedup") or 0) < 1.0]
        parity = (
            "met at every n"
            if not below
            else "not met at n = "
            + ", ".join(f"{n} ({rows[n]['speedup']:.3f}, {rows[n]['verdict']})" for n in below)
        )
        out.append(f"- Speedup >= 1.00 at every n: {parity}.")
        ideal = []
        for n, r in sorted(rows.items()):
            ours, ide = (r.get("us") or {}).get("ours"), r.get("ideal_us")
            if n >= 4 and ours and ide:
                ideal.append(f"n = {n}: {ours / ide:.3f}x")
        sm = best_sm_path_gbps(e.get("ceiling"))
        ceil = rows[max(rows)].get("ceiling_gbps")
        sm_note = (
            f" The ideal is bytes at the copy engine's {ceil:.1f} GB/s; the best SM-driven path in the sweep "
            f"(TMA rings and LDG grids) reached {sm:.1f} GB/s ({100 * sm / ceil:.0f}% of it): at that rate a copy "
            f"takes {ceil / sm:.3f}x the ideal before any fixed cost."
            if sm and ceil
            else ""
        )
        out.append("- Within 10% of the ideal for n >= 4 (ours / ideal): " + ", ".join(ideal) + "." + sm_note)
        r1, r2, r0 = rows.get(1), rows.get(2), rows.get(0)
        if r1 and r2 and r0:
            o1, o2, o0 = r1["us"]["ours"], r2["us"]["ours"], r0["us"]["ours"]
            u1 = r1["us"]["upstream"]
            per_expert, fixed = o2 - o1, o1 - (o2 - o1)
            need = u1 / 1.05 - per_expert
            out.append(
                f"- Speedup >= 1.05 at n = 1 and 2: {r1['speedup']:.3f} and {r2['speedup']:.3f}, not reached. From the "
                f"rows: one expert costs {per_expert:.1f} µs of streaming (n = 2 minus n = 1) plus {fixed:.1f} µs fixed, "
                f"{o0:.2f} µs of which is the empty launch (n = 0). 1.05x at n = 1 needs {u1 / 1.05:.1f} µs, i.e. a "
                f"fixed part of {need:.1f} µs: {need - o0:.1f} µs for the first host read to return and the last store "
                "to land, with the streaming rate already at the SM-read ceiling above."
            )
        out.append("")
    return out if len(out) > 2 else []


def open_questions_section(data: dict[str, dict[str, Any]]) -> list[str]:
    """The proposal's two open questions, answered from the sweep and the series."""
    q1 = [
        f"   - {m.get('device_name') or slug}: {line}."
        for slug, e in data.items()
        for m, line in [(machine_of(e), sweep_bytes_in_flight(e.get("ceiling")))]
        if line
    ]
    return [
        "## The proposal's open questions",
        "",
        "1. *Per-link setting or startup probe for CTAs and stages?* Bytes in flight is the quantity that matters, "
        f"not thread or CTA count; from the ceiling sweep (`{commands.SWEEP.nox}`):",
        *q1,
        "   The default ring (512 KiB) sits above that point here and below the ~1 MiB where the proposal's "
        "consumer host lost bandwidth; `FREETOKEN_DECODE_GATHER_RING` is the per-link override. No startup "
        "probe: on the link measured here every ring past the knee ties, so a probe would have nothing to choose.",
        "2. *A CI check against `.shared::cluster` bulk copies on sm_120?* Included as "
        "`tests/kernels/test_bulk_copy_sass.py`; it needs nvcc and cuobjdump, not a GPU.",
        "",
    ]


def not_measured_section() -> list[str]:
    return ["## Not measured", ""] + [f"- **{k}**: {v}." for k, v in NOT_MEASURED] + [""]


def pr_device_section(e: dict[str, Any]) -> str:
    """PR.md's results for one device: gather tables without the copy engine, decode step, verification."""
    out: list[str] = []
    bench = e.get("bench")
    if bench:
        out += [
            f"Per-layer time of the gather in a captured graph, default ring {default_ring_text(bench)}; "
            + ceiling_line(bench, e.get("ceiling")) + ".",
            "",
        ]
        for layers, rows in layer_groups(bench):
            out += [
                f"**{layers} layers**",
                "",
                gather_table(rows, copy_engine=False),
                "",
                verdict_sentence(rows, layers),
                "",
            ]
        d = bench.get("decode_step")
        if d:
            us = d.get("us_per_step") or {}
            out += [
                f"Decode step through the real cache ({d.get('layers')} layers, miss rate {f(d.get('miss_rate'), 3)}, "
                f"captured): unset {f(us.get('unset'), 1)} µs, tma {f(us.get('tma'), 1)} µs per step "
                f"(speedup {f(d.get('speedup'), 3)}). " + decode_step_note(d),
                "",
            ]
    s, san = e.get("summary"), e.get("sanitizer")
    if s or san:
        out += ["### Verification", ""]
    if s:
        t = s.get("totals") or {}
        tests = t.get("tests") or {}
        out += [
            f"- GPU conformance: {f(tests.get('passed', 0), 0)} passed, {f(tests.get('failed', 0), 0)} failed; "
            f"{f(t.get('verified_calls'), 0)} decode_gather calls byte-verified against a torch-indexing reference "
            f"({fmt_bytes(t.get('verified_bytes') or 0)}), every one on a poisoned slot cache with canaries."
        ]
    if san:
        tools = ", ".join(
            f"{tool} {r.get('errors') if r.get('errors') is not None else 'no summary'}"
            for tool, r in (san.get("tools") or {}).items()
        )
        out += [f"- compute-sanitizer errors: {tools}."]
    if bench and bench.get("verified"):
        v = bench["verified"]
        out += [f"- Benchmarks: every timed set byte-verified ({f(v.get('timed_sets'), 0)} sets)."]
    out += [""]
    out += extra_sections(e, heading="####")
    return "\n".join(out)


def device_name(slug: str, e: dict[str, Any]) -> str:
    """The GPU's name; ``results/<slug>x2/`` holds runs on two of them (the contention run)."""
    name = machine_of(e).get("device_name") or slug
    return f"2 x {name}" if slug.endswith("x2") else name


def headline(slug: str, e: dict[str, Any]) -> str:
    """One sentence: the device's verdict on the per-layer gather and on the decode step."""
    bench = e.get("bench") or {}
    rows = sorted(gather_rows(bench), key=lambda r: r["n"])
    main = [r for r in rows if r.get("layers") == 40 or r["n"] > 32]
    m = machine_of(e)
    link = f", PCIe Gen{m.get('pcie_gen_under_load') or m.get('pcie_gen_current')}" if m.get("pcie_gen_current") else ""
    if not main:
        if e.get("contention"):
            return f"On {device_name(slug, e)} of one host, {contention_sentence(e['contention'])}"
        return f"{device_name(slug, e)}{link}: no benchmark yet."
    groups = verdict_counts(main)
    parts = [f"{v} at n = {', '.join(str(n) for n in ns)}" for v, ns in sorted(groups.items())]
    text = f"On {device_name(slug, e)}{link}, decode_gather against fast_index_copy_multi per layer is " + "; ".join(parts)
    d = bench.get("decode_step")
    if d and d.get("speedup") is not None:
        spread = f" against an A/A spread of ±{d['aa_spread']:.3f}" if d.get("aa_spread") is not None else ""
        text += f"; the captured decode step is a {d.get('verdict')} ({d['speedup']:.3f}{spread})"
    step = (e.get("step_pdl") or {}).get("decode_step") or {}
    if "tma" in (step.get("ratio") or {}):
        text += (f" and, in the breakdown run, {step['verdict']['tma']} ({step['ratio']['tma']:.3f}, "
                 f"A/A ±{step['aa_spread']:.3f})")  # fmt: skip
    return text + "."


def status(doc: dict[str, Any] | None) -> str:
    if not doc:
        return "–"
    return "passed" if doc.get("passed") else "**not passed**"


def summary_rows(data: dict[str, dict[str, Any]]) -> list[list[str]]:
    """results/README.md's table: one row per miss count of the main graph and one for the decode step."""
    out = []
    for slug, e in data.items():
        bench = e.get("bench") or {}
        m = machine_of(e)
        series = m.get("series_hash") or (bench.get("provenance") or {}).get("series_hash") or "–"
        common = [status(e.get("summary")), status(e.get("sanitizer")), f"`{series}`"]
        for r in sorted(gather_rows(bench), key=lambda r: (r["layers"] != 40, r["layers"], r["n"])):
            if r.get("layers") != 40 and r["n"] <= 32:
                continue
            out.append([device_name(slug, e), f"gather, {r['layers']} layers", str(r["n"]), f(r.get("speedup"), 3),
                        spread_text(r), verdict_text(r), *common])  # fmt: skip
        d = bench.get("decode_step")
        if d:
            out.append([device_name(slug, e), f"decode step, {d.get('layers')} layers", f"{f(d.get('misses_per_step'), 1)} / step",
                        f(d.get("speedup"), 3), spread_text(d), verdict_text(d), *common])  # fmt: skip
    return out


def spread_text(r: dict[str, Any]) -> str:
    return ("±" + f(r.get("aa_spread"), 3)) if r.get("aa_spread") is not None else "–"


SUMMARY_HEADER = ["device", "what", "n", "ratio (upstream/ours)", "A/A spread", "verdict", "conformance", "sanitizer", "series"]


def context(results: Path) -> dict[str, Any]:
    """Everything the templates read."""
    data = load_results(results)
    return {
        "data": data,
        "devices": [
            {"slug": slug, "name": device_name(slug, e), "machine": machine_line(machine_of(e)), "entry": e,
             "history": (results / slug / "history" / "README.md").is_file(),
             "headline": headline(slug, e), "report": device_section(e), "pr": pr_device_section(e)}
            for slug, e in data.items()
        ],  # fmt: skip
        "summary": table(SUMMARY_HEADER, summary_rows(data)) if data else "",
        "verdict": next((headline(slug, e) for slug, e in data.items() if e.get("bench")), None),
        "sass": "\n".join(sass_section(results)),
        "targets": "\n".join(targets_section(data)),
        "open_questions": "\n".join(open_questions_section(data)),
        "not_measured": NOT_MEASURED,
        "cmd": commands,
    }


def render(results: Path) -> dict[str, str]:
    """{page name: text} of the three pages."""
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES), keep_trailing_newline=True, trim_blocks=True, lstrip_blocks=True,
        undefined=jinja2.StrictUndefined,
    )  # fmt: skip
    ctx = context(results)
    return {name: env.get_template(t).render(ctx).rstrip() + "\n" for name, t in PAGES.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--results", default=str(RESULTS), help="results directory (default: %(default)s)")
    ap.add_argument("--out", default=None, help="where the three pages go (default: the results directory)")
    args = ap.parse_args(argv)
    results = Path(args.results)
    out = Path(args.out) if args.out else results
    out.mkdir(parents=True, exist_ok=True)
    pages = render(results)
    for name, text in pages.items():
        (out / name).write_text(text)
    print(f"[report] {len(load_results(results))} device(s): wrote {', '.join(str(out / n) for n in pages)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
