"""The report's vocabulary: every word that states a conclusion is chosen here, from the figures.

One rule decides *faster*, *tie* and *slower* (:func:`suite.stats.verdict`): a ratio upstream/tma
(> 1: decode_gather faster) within the A/A spread of its own run is a tie, above it faster, below it
slower. The other words follow from that rule (what PDL did, whether a modelled effect is within the
noise) or from a plain comparison of two figures as the pages print them (targets, gaps, status).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping

from suite.stats import stands_out, verdict

VERDICTS = ("faster", "tie", "slower", "n/a")


def groups(rows: Iterable[Mapping[str, Any]]) -> dict[str, list[Any]]:
    """``{verdict: [n, ...]}`` in the order faster, tie, slower, n/a (verdicts with no row left out)."""
    out: dict[str, list[Any]] = {v: [] for v in VERDICTS}
    for r in rows:
        out.setdefault(r["verdict"] or "n/a", []).append(r["n"])
    return {v: ns for v, ns in out.items() if ns}


def effect(ratio: float | None, spread: float | None) -> str:
    """What a change did, from the ratio time without / time with it: helped, made no difference, hurt."""
    return {"faster": "helped", "tie": "made no difference to", "slower": "hurt"}.get(verdict(ratio, spread), "n/a")


def within(ratio: float | None, spread: float | None) -> str:
    """Whether ``ratio`` is inside the A/A spread (a tie) or beyond it."""
    return "within" if verdict(ratio, spread) == "tie" else "beyond"


def met(ok: bool) -> str:
    return "met" if ok else "not met"


def reached(ok: bool) -> str:
    return "reached" if ok else "not reached"


def passed(ok: bool | None) -> str:
    return "passed" if ok else "not passed"


def change(before: float, after: float) -> str:
    """lengthens / shortens / leaves, comparing two figures as printed (two decimals)."""
    b, a = round(before, 2), round(after, 2)
    return "lengthens" if a > b else "shortens" if a < b else "leaves"


def above(value: float, point: float) -> str:
    return "above" if value > point else "below" if value < point else "at"


def resolved(lo: float, hi: float) -> str:
    """Whether a range of paired per-round ratios stays on one side of 1.0."""
    return "resolved" if lo > 1 or hi < 1 else "not resolved: the range spans 1.0"


#: how a probe's bank backing (gpukit.memory.BACKINGS) reads in the report
PAGE_WORDS = {"hostbank": "FreeToken's HostBank pages (4 KiB)", "thp": "transparent 2 MiB pages",
              "hugetlb": "hugetlbfs 2 MiB pages"}  # fmt: skip


def e2e_settled(ratio: float | None, spreads: Iterable[float | None]) -> str:
    """Whether an end-to-end tokens/s ratio (tma / upstream) stands out of the repeats' own noise
    (suite.stats.stands_out: the end-to-end stand-in for an A/A spread)."""
    out = stands_out(ratio, spreads)
    return "n/a" if out is None else ("stands out of" if out else "does not stand out of")
