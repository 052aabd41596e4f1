"""The end-to-end A/B's statistics: one variant over its repeats, and every arm against upstream
(tokens/s of fresh processes; suite.stats.stands_out decides what is a difference)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from suite.stats import median, stands_out
from suite.kernels import Kernel

#: The A/B's variants by default: ``upstream`` (the baseline, first: ``FREETOKEN_DECODE_GATHER`` unset) and ``tma``; ``run --auto`` adds
#: :data:`AUTO` (FREETOKEN_DECODE_GATHER=auto: what each process's start-up probe chose).
VARIANTS = ("upstream", "tma")
AUTO = "auto"
VARIANT_ENV: dict[str, str | None] = {"upstream": None, "tma": "tma", AUTO: "auto"}


def spread(xs: Sequence[float]) -> float | None:
    """(max - min) / median; None for fewer than two values."""
    xs = [x for x in xs if x is not None]
    m = median(xs)
    return (max(xs) - min(xs)) / m if len(xs) >= 2 and m else None


def summarize_variant(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """One variant at one point: lists over repeats (repeat order) and their medians/spreads."""
    runs = sorted(runs, key=lambda r: r["repeat"])

    def col(key: str) -> list[Any]:
        return [r.get(key) for r in runs]

    tps = col("tokens_per_s")
    return {
        "repeats": len(runs),
        "tokens_per_s": tps,
        "tokens_per_s_median": median(tps),
        "tokens_per_s_min": min(tps) if tps else None,
        "tokens_per_s_max": max(tps) if tps else None,
        "tokens_per_s_spread": spread(tps),
        "step_ms_p50": [(r.get("step_ms") or {}).get("p50") for r in runs],
        "step_ms_p90": [(r.get("step_ms") or {}).get("p90") for r in runs],
        "ttft_s": col("ttft_s"),
        "ttft_s_median": median(col("ttft_s")),
        "misses_per_token": col("misses_per_token"),
        "misses_per_token_median": median(col("misses_per_token")),
        "miss_rate": col("miss_rate"),
        "miss_rate_median": median(col("miss_rate")),
        "misses_total": col("misses_total"),
        "vram_peak_reserved_bytes": max((x for x in col("vram_peak_reserved_bytes") if x is not None), default=None),
        "vram_device_used_bytes": max((x for x in col("vram_device_used_bytes") if x is not None), default=None),
        "ids_sha256": col("ids_sha256"),
        "copy_kernel": sorted({k for k in col("copy_kernel") if k}),
        "load_s": col("load_s"),
    }


def ids_mismatches(runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Every (repeat, point) whose variants (two or more of them so far) generated different ids."""
    by_key: dict[tuple[int, int], dict[str, str]] = {}
    for r in runs:
        by_key.setdefault((r["repeat"], r["point"]), {})[r["variant"]] = r["ids_sha256"]
    return [
        {"repeat": k[0], "point": k[1], **v} for k, v in sorted(by_key.items()) if len(v) > 1 and len(set(v.values())) > 1
    ]


def versus_upstream(mine: list[dict[str, Any]], arm: str, variants: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """``arm`` against upstream at one point: the ratio of medians, the paired ratios (one per repeat
    with both) and the verdict; a difference needs both every paired repeat on one side of 1 and
    the ratio out of either variant's spread over its repeats."""
    base, ours = variants[Kernel.UPSTREAM]["tokens_per_s_median"], variants[arm]["tokens_per_s_median"]
    paired = []
    for r in sorted({x["repeat"] for x in mine}):
        pair = {x["variant"]: x["tokens_per_s"] for x in mine if x["repeat"] == r}
        if arm in pair and pair.get(Kernel.UPSTREAM):
            paired.append(pair[arm] / pair[Kernel.UPSTREAM])
    speedup = ours / base if base and ours else None
    spreads = [variants[v].get("tokens_per_s_spread") for v in ("upstream", arm)]
    if not paired:
        verdict = "n/a"
    elif min(paired) <= 1.0 <= max(paired) or not stands_out(speedup, spreads):
        verdict = "tie"
    else:
        verdict = "faster" if min(paired) > 1.0 else "slower"
    return {
        "speedup": speedup,  # arm / upstream, medians of tokens/s (> 1: arm faster)
        "speedup_paired": paired,
        "speedup_paired_min": min(paired) if paired else None,
        "speedup_paired_max": max(paired) if paired else None,
        "verdict": verdict,
    }


def summarize_point(
    point: dict[str, Any], index: int, runs: list[dict[str, Any]], names: Sequence[str] = VARIANTS
) -> dict[str, Any]:
    """One slot point: every variant of ``names`` (``upstream`` first) over its repeats, ``tma`` against
    upstream at the top level, and every arm against upstream in ``versus_upstream``."""
    mine = [r for r in runs if r["point"] == index]
    variants = {v: summarize_variant([r for r in mine if r["variant"] == v]) for v in names}
    complete = [
        r for r in sorted({x["repeat"] for x in mine}) if {x["variant"] for x in mine if x["repeat"] == r} >= set(names)
    ]
    mism = ids_mismatches(mine)
    counts = [{x["variant"]: x.get("misses_total") for x in mine if x["repeat"] == r} for r in complete]
    versus = {arm: versus_upstream(mine, arm, variants) for arm in names if arm != "upstream"}
    return {
        **point,
        "variants": variants,
        **versus[Kernel.TMA],
        "versus_upstream": versus,
        "ids_identical": (not mism) if complete else None,
        "miss_counts_identical": all(len(set(c.values())) == 1 for c in counts) if counts else None,
    }
