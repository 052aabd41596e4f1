"""Statistics of paired alternating rounds: medians, the speedup, the A/A spread, the verdict.

A speedup is base/candidate (> 1: the candidate faster); it is a *tie* when |speedup - 1| is within the A/A spread,
the largest per-round deviation of the baseline against a second capture of itself in the same run.
"""

from __future__ import annotations

import statistics
from typing import Any, Iterable


def median(xs: Iterable[float]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def verdict(speedup: float | None, aa_spread: float | None) -> str:
    """'tie' when |speedup - 1| is inside the A/A spread (the noise of upstream against itself)."""
    if speedup is None or aa_spread is None:
        return "n/a"
    if abs(speedup - 1.0) <= aa_spread:
        return "tie"
    return "faster" if speedup > 1.0 else "slower"


def summarize_rounds(
    rounds_us: dict[str, list[float]], *, candidate: str = "tma", base: str = "upstream", aa: str = "upstream_aa"
) -> dict[str, Any]:
    """Medians of per-round times, the speedup base/candidate (>1: the candidate faster), its paired (per-round)
    median, the A/A ratios base/aa per round and their spread max|r-1|, and the verdict."""
    med = {k: median(v) for k, v in rounds_us.items() if v}
    out: dict[str, Any] = {"median_us": med}
    b, o = rounds_us.get(base) or [], rounds_us.get(candidate) or []
    a = rounds_us.get(aa) or []
    out["speedup"] = (med[base] / med[candidate]) if med.get(base) and med.get(candidate) else None
    paired = [x / y for x, y in zip(b, o) if y]
    out["speedup_paired"] = median(paired)
    aa_ratios = [x / y for x, y in zip(b, a) if y]
    out["aa_ratios"] = aa_ratios
    out["aa_ratio"] = median(aa_ratios)
    out["aa_spread"] = max((abs(r - 1.0) for r in aa_ratios), default=None)
    out["verdict"] = verdict(out["speedup"], out["aa_spread"])
    return out


def stands_out(ratio: float | None, spreads: Iterable[float | None]) -> bool | None:
    """Whether a ratio of fresh-process runs (no paired A/A control) stands out of their own noise:
    |ratio - 1| above every variant's spread over its repeats ((max - min) / median). None: no data."""
    s = [x for x in spreads if x is not None]
    if ratio is None or not s:
        return None
    return abs(ratio - 1.0) > max(s)
