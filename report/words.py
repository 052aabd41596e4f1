"""The report's vocabulary: every word that states a conclusion is chosen here.

*faster*, *tie* and *slower* are the verdicts the writers stored (:class:`suite.stats.Comparison`, by the
rule it names); the words here restate them (:func:`within`, :func:`settled`) or compare two figures as the
pages print them (targets, gaps, status). The jinja2 filters of the same names are these functions.
"""

from __future__ import annotations

from typing import Any, Iterable

from suite.kernels import VERDICTS
from suite.stats import Comparison


def groups(pairs: Iterable[tuple[Any, str]]) -> dict[str, list[Any]]:
    """``{verdict: [n, ...]}`` of ``(n, verdict)`` pairs, in the order faster, tie, slower, n/a (verdicts with
    no row left out)."""
    out: dict[str, list[Any]] = {v: [] for v in VERDICTS}
    for n, v in pairs:
        out.setdefault(v or "n/a", []).append(n)
    return {v: ns for v, ns in out.items() if ns}


def within(c: Comparison) -> str:
    """Whether the ratio is inside the noise of its rule (a tie) or beyond it."""
    return "within" if c.verdict == "tie" else "beyond"


def settled(c: Comparison) -> str:
    """Whether an end-to-end ratio stands out of max(its rule's noise, MARGIN): its verdict (the rule ``aa``: the A/A
    spread; ``repeats``: the repeats' range) is not a tie."""
    return {"n/a": "n/a", "tie": "does not stand out of"}.get(c.verdict, "stands out of")


def phrase(verdict: str) -> str:
    """A verdict in a sentence: "a tie", else the verdict."""
    return "a tie" if verdict == "tie" else verdict


def affirm(word: str, ok: bool | None) -> str:
    """``word`` (met, reached, passed) when ``ok``, else "not <word>"."""
    return word if ok else f"not {word}"


def change(before: float, after: float) -> str:
    """lengthens / shortens / leaves, comparing two figures as printed (two decimals)."""
    b, a = round(before, 2), round(after, 2)
    return "lengthens" if a > b else "shortens" if a < b else "leaves"


def above(value: float, point: float) -> str:
    return "above" if value > point else "below" if value < point else "at"


#: the words the templates take as filters
FILTERS = {"within": within, "settled": settled, "phrase": phrase}
