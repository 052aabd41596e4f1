"""The end-to-end A/B's statistics: one kernel over its repeats (rounds), and every kernel against upstream: the
rule ``aa`` of :mod:`suite.stats` over the rounds of one process (seconds per token, with the A/A control
``upstream_aa``), the rule ``repeats`` over fresh processes (tokens/s)."""

from __future__ import annotations

import operator
from collections.abc import Sequence
from typing import Any

from suite.kernels import SWITCH_ENV, Kernel
from suite.stats import fresh_processes, median, paired_rounds, relative_range

#: The A/B's kernels by default: upstream (the baseline, first: the switch unset) and tma; ``run --auto`` adds
#: auto (the kernel ft bench bw's profile picked for the GPU).
KERNELS = (Kernel.UPSTREAM, Kernel.TMA)


def settings(names: Sequence[str]) -> dict[str, dict[str, str | None]]:
    """{kernel: {the switch: its value (None: unset)}} of the kernels ``names``, as the document records them."""
    return {v: {SWITCH_ENV: Kernel(v).env.get(SWITCH_ENV)} for v in names}


def summarize_kernel(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One kernel at one point: lists over repeats (repeat order) and their medians/ranges."""
    runs = sorted(runs, key=lambda r: r["repeat"])

    def col(key: str) -> list[Any]:
        return [r.get(key) for r in runs]

    def most(key: str) -> Any:
        return max((x for x in col(key) if x is not None), default=None)

    tps = col("tokens_per_s")
    return {
        "repeats": len(runs), "tokens_per_s": tps, "tokens_per_s_median": median(tps),
        "tokens_per_s_min": min(tps) if tps else None, "tokens_per_s_max": max(tps) if tps else None,
        "tokens_per_s_range": relative_range(tps),
        "step_ms_p50": [(r.get("step_ms") or {}).get("p50") for r in runs],
        "step_ms_p90": [(r.get("step_ms") or {}).get("p90") for r in runs],
        "ttft_s": col("ttft_s"), "ttft_s_median": median(col("ttft_s")),
        "misses_per_token": col("misses_per_token"), "misses_per_token_median": median(col("misses_per_token")),
        "miss_rate": col("miss_rate"), "miss_rate_median": median(col("miss_rate")),
        "misses_total": col("misses_total"), "vram_peak_reserved_bytes": most("vram_peak_reserved_bytes"),
        "vram_device_used_bytes": most("vram_device_used_bytes"), "ids_sha256": col("ids_sha256"),
        "copy_kernel": sorted({k for k in col("copy_kernel") if k}), "load_s": col("load_s"),
    }  # fmt: skip


def ids_mismatches(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every (repeat, point) whose kernels (two or more of them so far) generated different ids."""
    by_key: dict[tuple[int, int], dict[str, str]] = {}
    for r in runs:
        by_key.setdefault((r["repeat"], r["point"]), {})[r["kernel"]] = r["ids_sha256"]
    return [{"repeat": k[0], "point": k[1], **v} for k, v in sorted(by_key.items()) if len(set(v.values())) > 1]


def state_mismatches(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Of runs that all start from the same cold cache (one process): each run whose ids or miss count differ from
    its point's first run's, beside that first run (``repeat, kernel, ids_sha256, misses_total``)."""
    first: dict[int, dict[str, Any]] = {}
    key, same = operator.itemgetter("repeat", "kernel", "ids_sha256", "misses_total"), operator.itemgetter(2, 3)
    return [{"run": key(r), "first": key(f)} for r in runs
            if same(key(f := first.setdefault(r["point"], r))) != same(key(r))]  # fmt: skip


def summarize_point(
    point: dict[str, Any], index: int, runs: list[dict[str, Any]], names: Sequence[str] = KERNELS
) -> dict[str, Any]:
    """One slot point: every kernel of ``names`` (upstream first) over its repeats, and every other kernel against
    upstream (``ratio``): with ``upstream_aa`` among ``names`` (rounds of one process) suite.stats.paired_rounds of the
    complete rounds' seconds per token, and every run's ids and misses the same; else suite.stats.fresh_processes
    of tokens/s by repeat, and each repeat's ids and misses the same."""
    mine = [r for r in runs if r["point"] == index]
    kernels = {v: summarize_kernel([r for r in mine if r["kernel"] == v]) for v in names}
    rates = {v: {r["repeat"]: r["tokens_per_s"] for r in mine if r["kernel"] == v} for v in names}
    complete = [r for r in sorted({x["repeat"] for x in mine})
                if {x["kernel"] for x in mine if x["repeat"] == r} >= set(names)]  # fmt: skip
    others = [k for k in names if k not in (Kernel.UPSTREAM, Kernel.UPSTREAM_AA)]
    if Kernel.UPSTREAM_AA in names:
        times = {v: [1.0 / rates[v][r] for r in complete] for v in names}
        ratio = {k: paired_rounds(times[Kernel.UPSTREAM], times[k], times[Kernel.UPSTREAM_AA]) for k in others}
        ids_same = len({x["ids_sha256"] for x in mine}) == 1
        misses_same = len({x.get("misses_total") for x in mine}) == 1
    else:
        ratio = {k: fresh_processes(rates[Kernel.UPSTREAM], rates[k]) for k in others}
        ids_same = not ids_mismatches(mine)
        counts = [{x["kernel"]: x.get("misses_total") for x in mine if x["repeat"] == r} for r in complete]
        misses_same = all(len(set(c.values())) == 1 for c in counts)
    return {**point, "kernels": kernels, "ratio": ratio, "ids_identical": ids_same if complete else None,
            "miss_counts_identical": misses_same if complete else None}  # fmt: skip
