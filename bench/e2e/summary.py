"""The end-to-end A/B's statistics: one kernel over its repeats, and every kernel against upstream
(tokens/s of fresh processes, the rule ``repeats`` of :mod:`suite.stats`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from suite.kernels import SWITCH_ENV, Kernel
from suite.stats import fresh_processes, median, relative_range

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


def summarize_point(
    point: dict[str, Any], index: int, runs: list[dict[str, Any]], names: Sequence[str] = KERNELS
) -> dict[str, Any]:
    """One slot point: every kernel of ``names`` (upstream first) over its repeats, and every other kernel
    against upstream (``ratio``: suite.stats.fresh_processes of their tokens/s by repeat)."""
    mine = [r for r in runs if r["point"] == index]
    kernels = {v: summarize_kernel([r for r in mine if r["kernel"] == v]) for v in names}
    rates = {v: {r["repeat"]: r["tokens_per_s"] for r in mine if r["kernel"] == v} for v in names}
    complete = [r for r in sorted({x["repeat"] for x in mine})
                if {x["kernel"] for x in mine if x["repeat"] == r} >= set(names)]  # fmt: skip
    counts = [{x["kernel"]: x.get("misses_total") for x in mine if x["repeat"] == r} for r in complete]
    return {
        **point, "kernels": kernels,
        "ratio": {k: fresh_processes(rates[Kernel.UPSTREAM], rates[k]) for k in names if k != Kernel.UPSTREAM},
        "ids_identical": (not ids_mismatches(mine)) if complete else None,
        "miss_counts_identical": all(len(set(c.values())) == 1 for c in counts) if counts else None,
    }  # fmt: skip
