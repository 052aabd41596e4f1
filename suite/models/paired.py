"""The paired alternating-rounds result of one case: the one shape of the benchmark's ``extra_info["paired"]``
(``bench/test_bench_gather.py``) and of ``step_pdl.json``'s per-layer cases (``bench/step_pdl.py``).

    p = paired(rounds.values, ["tma"], base="upstream", aa="upstream_aa", reps=20)
    p.ratio["tma"], p.verdict["tma"], p.aa_spread
    extra_info["paired"] = p.to_doc()

Ratios are base/candidate (> 1: the candidate faster), per candidate; the A/A control's ratios
base/aa per round, their median and spread (:func:`suite.stats.summarize_rounds`).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Sequence

from suite.kernels import AA, BASE, CANDIDATE
from suite.models.base import Model, field
from suite.stats import summarize_rounds



@dataclasses.dataclass
class Paired(Model):
    base: str = BASE
    aa: str = AA
    rounds: int | None = None
    order: str = "alternating"
    ratio: dict[str, float | None] = field({})  # base / candidate, medians of the rounds
    ratio_paired: dict[str, float | None] = field({})  # the median of the per-round ratios
    verdict: dict[str, str] = field({})
    aa_ratio: float | None = None
    aa_ratios: list[float] = field([])
    aa_spread: float | None = None
    median_us: dict[str, float] = field({})
    rounds_us: dict[str, list[float]] = field({})
    extra: dict[str, Any] = field({})  # the case's own facts (reps, footprint, verified_sets, ...)

    def candidate(self, name: str = "tma") -> tuple[float | None, str | None]:
        """(ratio, verdict) of ``name``."""
        return self.ratio.get(name), self.verdict.get(name)


def paired(
    rounds_us: dict[str, list[float]], candidates: Sequence[str], *, base: str = BASE, aa: str = AA, **extra: Any
) -> Paired:
    """The paired result of one case's rounds (``rounds_us``: every variant's per-round timings) for
    ``candidates`` against ``base``, its A/A control ``aa``; ``extra``: the case's own facts."""
    s = {c: summarize_rounds(rounds_us, candidate=c, base=base, aa=aa) for c in candidates}
    first = s[candidates[0]] if candidates else summarize_rounds(rounds_us, candidate=base, base=base, aa=aa)
    return Paired(
        base=base, aa=aa, rounds=len(rounds_us[base]), order="alternating",
        ratio={c: s[c]["speedup"] for c in candidates},
        ratio_paired={c: s[c]["speedup_paired"] for c in candidates},
        verdict={c: s[c]["verdict"] for c in candidates},
        aa_ratio=first["aa_ratio"], aa_ratios=first["aa_ratios"], aa_spread=first["aa_spread"],
        median_us=first["median_us"], rounds_us=rounds_us, extra=extra,
    )  # fmt: skip
