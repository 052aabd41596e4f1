"""The paired-rounds result of one case: the one shape of the benchmark's ``extra_info["paired"]``
(``bench/test_bench_gather.py``) and of ``step_pdl.json``'s per-layer cases (``bench/step_pdl.py``).

    p = paired(run_rounds(timers, 7, base="upstream", aa="upstream_aa"), reps=20)
    p.ratio["tma"]                  # suite.stats.Comparison: ratio, A/A spread, verdict, rule
    extra_info["paired"] = p.to_doc()
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping, Sequence

from suite.kernels import AA, BASE
from suite.models.base import Model, field
from suite.rounds import Rounds
from suite.stats import Comparison, aa_ratios, median


@dataclasses.dataclass
class Paired(Model):
    base: str = BASE
    aa: str = AA
    rounds: int | None = None
    order: str = "alternate"  # the order the rounds ran in (suite.rounds)
    ratio: dict[str, Comparison] = field({})  # per kernel, against base
    aa_ratio: float | None = None
    aa_ratios: list[float] = field([])
    aa_spread: float | None = None
    median_us: dict[str, float] = field({})
    rounds_us: dict[str, list[float]] = field({})
    extra: dict[str, Any] = field({})  # the case's own facts (reps, footprint, verified_sets, ...)

    NESTED = {"ratio": (dict, Comparison)}

    @classmethod
    def normalise(cls, doc: dict[str, Any]) -> dict[str, Any]:
        doc["ratio"] = comparisons(doc)
        return doc


def comparisons(doc: dict[str, Any]) -> dict[str, Any]:
    """``doc["ratio"]``; a case of before the Comparison ({kernel: ratio}, ``ratio_paired`` and ``verdict``
    beside it) read as Comparisons of the rule ``aa``, from its own figures (the rounds give the paired min and max)."""
    ratio = doc.get("ratio") or {}
    if all(isinstance(v, Mapping) for v in ratio.values()):
        return ratio
    aa_spread, rounds = doc.get("aa_spread"), doc.get("rounds_us") or {}
    doc.pop("verdict", None)  # a Comparison decides its own verdict
    medians = doc.pop("ratio_paired", None) or {}
    out = {}
    for c, x in ratio.items():
        per = [b / t for b, t in zip(rounds.get(doc.get("base", BASE), []), rounds.get(c, [])) if t]
        out[c] = Comparison(x, medians.get(c, median(per)), min(per, default=None), max(per, default=None), aa_spread)
    return out


def paired(r: Rounds, kernels: Sequence[str] | None = None, **extra: Any) -> Paired:
    """The paired result of one case's rounds (every kernel's per-round timings, base and A/A control as
    :func:`suite.rounds.run_rounds` was given them) for ``kernels`` (default: every other kernel);
    ``extra``: the case's own facts."""
    v = r.values
    ratios = aa_ratios(v[r.base], v[r.aa])
    return Paired(base=r.base, aa=r.aa, rounds=len(v[r.base]), order=r.order,
                  ratio={c: r.summary(c) for c in kernels or r.summaries()}, aa_ratio=median(ratios),
                  aa_ratios=ratios, aa_spread=max((abs(x - 1.0) for x in ratios), default=None),
                  median_us={k: median(x) for k, x in v.items()}, rounds_us=v, extra=extra)  # fmt: skip
