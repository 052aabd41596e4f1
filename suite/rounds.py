"""Paired alternating rounds with an A/A control: the one round loop of every A/B measurement here.

    from suite.rounds import run_rounds
    r = run_rounds(
        {"upstream": time_upstream, "upstream_aa": time_upstream_again, "tma": time_tma},
        rounds=7, base="upstream", aa="upstream_aa",
        before_round=lambda i: misses.refresh(seed=i),   # e.g. a fresh miss list for the round
        after_round=lambda i: check_caches(i),           # e.g. every kernel left the same state
    )
    r.values["tma"]       # one timing per round
    r.summary("tma")      # suite.stats.paired_rounds: the Comparison of tma against upstream (rule "aa")

A kernel (its timer) is a callable ``fn(round_index)`` returning the round's timing: a number, a list of samples
(:attr:`Rounds.values` reduces them, by default to their median), or None (nothing to time). Every round
runs every kernel once: even rounds in the order given, odd rounds reversed (``order="fixed"``, or
``order=fn(round_index, names) -> names``). The A/A control ``aa`` is a second instance of ``base``
measured in the same rounds: the A/A spread decides faster, tie and slower (:mod:`suite.stats`).
"""

from __future__ import annotations

import dataclasses
import statistics
from typing import Any, Callable, Mapping, Sequence

from suite.stats import Comparison, paired_rounds

Timing = float | Sequence[float] | None
Order = str | Callable[[int, Sequence[str]], Sequence[str]]


@dataclasses.dataclass
class Rounds:
    """What :func:`run_rounds` measured: each kernel's results round by round, and the order of each round."""

    samples: dict[str, list[Any]]  # what each callable returned, round by round
    orders: list[tuple[str, ...]]
    base: str | None = None
    aa: str | None = None
    reduce: Callable[[Sequence[float]], float] = statistics.median
    order: str = "alternate"  # the order the rounds ran in: alternate, fixed, or the callable's name

    @property
    def values(self) -> dict[str, list[float]]:
        """One number per round for each kernel that timed something (a list reduced by ``reduce``)."""
        timed = {name: [self.reduce(x) if isinstance(x, (list, tuple)) else x for x in got if x is not None]
                 for name, got in self.samples.items()}  # fmt: skip
        return {name: values for name, values in timed.items() if values}

    def summary(self, kernel: str) -> Comparison:
        """``kernel`` against ``base`` (and ``aa``): :func:`suite.stats.paired_rounds`."""
        if self.base is None:
            raise ValueError("run_rounds(..., base=...) names no baseline to compare against")
        v = self.values
        return paired_rounds(v.get(self.base, []), v.get(kernel, []), v.get(self.aa, []) if self.aa else [])

    def summaries(self) -> dict[str, Comparison]:
        """:meth:`summary` of every kernel other than the baseline and its A/A control."""
        return {name: self.summary(name) for name in self.values if name not in (self.base, self.aa)}


def round_order(order: Order, index: int, names: Sequence[str]) -> tuple[str, ...]:
    """Round ``index``'s kernels: ``alternate`` (even rounds as given, odd reversed), ``fixed``, or a callable's."""
    if callable(order):
        got = tuple(order(index, names))
        if sorted(got) != sorted(names):
            raise ValueError(f"round {index}: the order {got} does not run every kernel once")
        return got
    if order == "alternate":
        return tuple(names) if index % 2 == 0 else tuple(reversed(names))
    if order == "fixed":
        return tuple(names)
    raise ValueError(f"order={order!r}: expected 'alternate', 'fixed' or a callable")


def run_rounds(kernels: Mapping[str, Callable[[int], Timing]], rounds: int, *, base: str | None = None,
               aa: str | None = None, order: Order = "alternate", before_round: Callable[[int], None] | None = None,
               after_round: Callable[[int], None] | None = None,
               reduce: Callable[[Sequence[float]], float] = statistics.median) -> Rounds:  # fmt: skip
    """Run ``rounds`` rounds of every kernel (see the module docstring); ``base`` and ``aa`` name the
    baseline and its A/A control among ``kernels``."""
    names = list(kernels)
    for role, name in (("base", base), ("aa", aa)):
        if name is not None and name not in kernels:
            raise ValueError(f"{role}={name!r} is not one of the kernels {names}")
    if aa is not None and (base is None or aa == base):
        raise ValueError("the A/A control needs a baseline of its own (base=..., different from aa)")
    if rounds < 1:
        raise ValueError(f"rounds={rounds}: at least one round")
    samples: dict[str, list[Any]] = {name: [] for name in names}
    orders = []
    for index in range(rounds):
        if before_round is not None:
            before_round(index)
        this = round_order(order, index, names)
        for name in this:
            samples[name].append(kernels[name](index))
        orders.append(this)
        if after_round is not None:
            after_round(index)
    return Rounds(samples, orders, base, aa, reduce, order if isinstance(order, str) else order.__name__)
