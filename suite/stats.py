"""The one comparison of a kernel against its base: :class:`Comparison`, decided by a named rule.

A ratio (the word as :mod:`suite.kernels` defines it) is how much faster the kernel is (> 1: the kernel
faster): base time / kernel time of paired rounds, or kernel rate / base rate of fresh-process runs. :data:`RULES`
names the two ways a verdict (*faster*, *tie*, *slower*, *n/a*) is decided from it, never beyond 1 +-
:data:`MARGIN`. A Comparison decides its own verdict (:meth:`Comparison.decide`): one stored by an older rule
reads back with this rule's.
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Iterable, Mapping, Sequence

#: The least |ratio - 1| any verdict calls faster or slower: a gap within max(noise, MARGIN) is a tie. The series
#: names the same margin once, ``freetoken.kernel.decode_gather.MARGIN`` (its benchmark's verdicts and ``ft bench bw``'s
#: pick use it); tests/test_upstream_layout.py holds them equal.
MARGIN = 0.005

#: {rule: how it decides}: the ``rule`` every Comparison names
RULES = {
    "aa": "paired rounds with an A/A control: a tie when |ratio - 1| is within max(A/A spread, MARGIN), the A/A "
    "spread the largest per-round |base / A/A - 1| of the same rounds",
    "repeats": "fresh processes, no A/A control: a tie when the per-repeat ratios straddle 1 or |ratio - 1| is "
    "within max(the repeats' range, MARGIN), the range the larger (max - min) / median of either kernel's repeats",
}


@dataclasses.dataclass(frozen=True)
class Comparison:
    """A kernel against its base: the ratio of medians, the median, min and max of the per-round (per-repeat)
    ratios, the noise of its rule (``aa_spread`` for ``aa``, ``repeat_range`` for ``repeats``), the verdict its
    rule gives them (:meth:`decide`: a ``verdict`` passed in is replaced)."""

    ratio: float | None = None
    ratio_paired: float | None = None
    paired_min: float | None = None
    paired_max: float | None = None
    aa_spread: float | None = None
    repeat_range: float | None = None
    verdict: str = "n/a"
    rule: str = "aa"

    def __post_init__(self) -> None:
        object.__setattr__(self, "verdict", self.decide())

    def decide(self) -> str:
        """The verdict of ``RULES[rule]`` from the figures (``repeats``: paired_min-max, the per-repeat range)."""
        if self.rule != "repeats":
            return verdict(self.ratio, self.aa_spread)
        if self.paired_min is None or self.paired_max is None:
            return "n/a"
        if self.paired_min <= 1.0 <= self.paired_max or verdict(self.ratio, self.repeat_range) in ("tie", "n/a"):
            return "tie"
        return "faster" if self.paired_min > 1.0 else "slower"

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
    """The rule ``aa``: 'tie' when |ratio - 1| is inside max(A/A spread, :data:`MARGIN`) (the A/A spread: the noise
    of the base against itself)."""
    if ratio is None or aa_spread is None:
        return "n/a"
    if abs(ratio - 1.0) <= max(aa_spread, MARGIN):
        return "tie"
    return "faster" if ratio > 1.0 else "slower"


def aa_ratios(base: Sequence[float], aa: Sequence[float]) -> list[float]:
    """base / A/A control per round."""
    return [x / y for x, y in zip(base, aa) if y]


def _ranged(ratio: float | None, per: list[float], **rest: Any) -> Comparison:
    return Comparison(ratio, median(per), min(per, default=None), max(per, default=None), **rest)


def paired_rounds(base: Sequence[float], kernel: Sequence[float], aa: Sequence[float] = ()) -> Comparison:
    """The rule ``aa`` over per-round times: median(base) / median(kernel), against the A/A spread."""
    b, c = median(base), median(kernel)
    ratio = b / c if b and c else None
    aa_spread = max((abs(r - 1.0) for r in aa_ratios(base, aa)), default=None)
    per = [x / y for x, y in zip(base, kernel) if y]
    return _ranged(ratio, per, aa_spread=aa_spread, rule="aa")


def fresh_processes(base: Mapping[Any, float], kernel: Mapping[Any, float]) -> Comparison:
    """The rule ``repeats`` over rates (tokens/s) of fresh processes, keyed by repeat: median(kernel) /
    median(base), the per-repeat ratios and the larger relative range of the two kernels' repeats."""
    b, c = median(base.values()), median(kernel.values())
    ratio = c / b if b and c else None
    per = [kernel[r] / base[r] for r in sorted(kernel) if base.get(r)]
    ranges = [relative_range(list(x.values())) for x in (base, kernel)]
    noise = max((x for x in ranges if x is not None), default=None)
    return _ranged(ratio, per, repeat_range=noise, rule="repeats")
