"""The one comparison of a candidate against its base: :class:`Comparison`, decided by a named rule.

A ratio is how much faster the candidate is (> 1: the candidate faster): base time / candidate time of
paired rounds, or candidate rate / base rate of fresh-process runs. :data:`RULES` names the two ways a
verdict (*faster*, *tie*, *slower*, *n/a*) is decided from it; every document, view and page carries the
Comparison its writer made, under the name ``ratio``, and recomputes nothing.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Iterable, Mapping, Sequence

#: {rule: how it decides}: the ``rule`` every Comparison names
RULES = {
    "aa": "paired rounds with an A/A control: a tie when |ratio - 1| is within the A/A spread, the largest "
    "per-round |base / A/A - 1| of the same rounds",
    "repeats": "fresh processes, no A/A control: a tie when the per-repeat ratios straddle 1 or |ratio - 1| is "
    "within the repeats' range, the larger (max - min) / median of either arm's repeats",
}


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A candidate against its base: the ratio of medians, the median and range of the per-round (per-repeat)
    ratios, the noise of its rule (``aa_spread`` for ``aa``, ``repeat_range`` for ``repeats``), the verdict."""

    ratio: float | None = None
    ratio_paired: float | None = None
    paired_min: float | None = None
    paired_max: float | None = None
    aa_spread: float | None = None
    repeat_range: float | None = None
    verdict: str = "n/a"
    rule: str = "aa"

    def to_doc(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_doc(cls, doc: Mapping[str, Any] | None) -> Comparison | None:
        return doc if doc is None or isinstance(doc, cls) else cls(**doc)


def median(xs: Iterable[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def relative_range(xs: Sequence[float | None]) -> float | None:
    """(max - min) / median; None for fewer than two values."""
    xs = [x for x in xs if x is not None]
    m = median(xs)
    return (max(xs) - min(xs)) / m if len(xs) >= 2 and m else None


def verdict(ratio: float | None, aa_spread: float | None) -> str:
    """The rule ``aa``: 'tie' when |ratio - 1| is inside the A/A spread (the noise of the base against itself)."""
    if ratio is None or aa_spread is None:
        return "n/a"
    if abs(ratio - 1.0) <= aa_spread:
        return "tie"
    return "faster" if ratio > 1.0 else "slower"


def aa_ratios(base: Sequence[float], aa: Sequence[float]) -> list[float]:
    """base / A/A control per round."""
    return [x / y for x, y in zip(base, aa) if y]


def _ranged(ratio: float | None, per: list[float], **rest: Any) -> Comparison:
    return Comparison(ratio, median(per), min(per, default=None), max(per, default=None), **rest)


def paired_rounds(base: Sequence[float], candidate: Sequence[float], aa: Sequence[float] = ()) -> Comparison:
    """The rule ``aa`` over per-round times: median(base) / median(candidate), against the A/A spread."""
    b, c = median(base), median(candidate)
    ratio = b / c if b and c else None
    spread = max((abs(r - 1.0) for r in aa_ratios(base, aa)), default=None)
    per = [x / y for x, y in zip(base, candidate) if y]
    return _ranged(ratio, per, aa_spread=spread, verdict=verdict(ratio, spread), rule="aa")


def fresh_processes(base: Mapping[Any, float], candidate: Mapping[Any, float]) -> Comparison:
    """The rule ``repeats`` over rates (tokens/s) of fresh processes, keyed by repeat: median(candidate) /
    median(base), the per-repeat ratios and the larger relative range of the two arms' repeats."""
    b, c = median(base.values()), median(candidate.values())
    ratio = c / b if b and c else None
    per = [candidate[r] / base[r] for r in sorted(candidate) if base.get(r)]
    ranges = [relative_range(list(arm.values())) for arm in (base, candidate)]
    noise = max((x for x in ranges if x is not None), default=None)
    if not per:
        word = "n/a"
    elif min(per) <= 1.0 <= max(per) or ratio is None or noise is None or abs(ratio - 1.0) <= noise:
        word = "tie"
    else:
        word = "faster" if min(per) > 1.0 else "slower"
    return _ranged(ratio, per, repeat_range=noise, verdict=word, rule="repeats")
