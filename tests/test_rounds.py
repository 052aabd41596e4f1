"""The paired-rounds runner on fake timers (no GPU): order, hooks, the A/A control, the summary."""

from __future__ import annotations

import pytest

from suite.rounds import round_order, run_rounds


class FakeTimer:
    """A kernel's timer that records when it ran (on a shared log) and returns a fixed timing per round."""

    def __init__(self, name: str, log: list, times):
        self.name, self.log, self.times = name, log, times

    def __call__(self, index: int):
        self.log.append((index, self.name))
        return self.times(index) if callable(self.times) else self.times


def test_rounds_alternate_and_hooks_bracket_every_round():
    log: list = []
    kernels = {n: FakeTimer(n, log, 1.0) for n in ("upstream", "upstream_aa", "tma")}
    r = run_rounds(
        kernels, 3, base="upstream", aa="upstream_aa",
        before_round=lambda i: log.append((i, "before")), after_round=lambda i: log.append((i, "after")),
    )  # fmt: skip
    assert log == [
        (0, "before"), (0, "upstream"), (0, "upstream_aa"), (0, "tma"), (0, "after"),
        (1, "before"), (1, "tma"), (1, "upstream_aa"), (1, "upstream"), (1, "after"),
        (2, "before"), (2, "upstream"), (2, "upstream_aa"), (2, "tma"), (2, "after"),
    ]  # fmt: skip
    assert r.orders[1] == ("tma", "upstream_aa", "upstream") and r.values["tma"] == [1.0] * 3


def test_summary_is_gpukit_stats_of_the_paired_rounds():
    up = [10.0, 10.2, 9.9, 10.1, 10.0]
    aa = [10.1, 10.0, 10.0, 10.0, 10.1]
    log: list = []
    kernels = {
        "upstream": FakeTimer("upstream", log, lambda i: up[i]),
        "upstream_aa": FakeTimer("upstream_aa", log, lambda i: aa[i]),
        "tma": FakeTimer("tma", log, lambda i: [8.0, 8.2, 7.0]),  # three samples a round: their median
        "tie": FakeTimer("tie", log, lambda i: up[i] * 1.001),
    }
    r = run_rounds(kernels, 5, base="upstream", aa="upstream_aa")
    s = r.summary("tma")
    assert r.values["tma"] == [8.0] * 5
    assert s.ratio == pytest.approx(10.0 / 8.0) and (s.verdict, s.rule) == ("faster", "aa")
    assert s.aa_spread == pytest.approx(max(abs(u / a - 1) for u, a in zip(up, aa)))
    assert (s.paired_min, s.paired_max) == (pytest.approx(9.9 / 8), pytest.approx(10.2 / 8))
    assert set(r.summaries()) == {"tma", "tie"} and r.summaries()["tie"].verdict == "tie"
    assert r.order == "alternate"


def test_untimed_variants_and_custom_orders():
    log: list = []
    r = run_rounds({"a": FakeTimer("a", log, None), "b": FakeTimer("b", log, None)}, 2)
    assert r.values == {} and r.orders == [("a", "b"), ("b", "a")]
    with pytest.raises(ValueError, match="baseline"):
        r.summary("a")
    fixed = run_rounds({"a": FakeTimer("a", log, 1.0), "b": FakeTimer("b", log, 2.0)}, 2, order="fixed")
    assert fixed.orders == [("a", "b"), ("a", "b")] and fixed.order == "fixed"
    assert round_order(lambda i, names: sorted(names, reverse=True), 0, ["a", "b"]) == ("b", "a")
    with pytest.raises(ValueError, match="every kernel once"):
        round_order(lambda i, names: ["a"], 0, ["a", "b"])


@pytest.mark.parametrize(
    "kwargs, match",
    [({"base": "nope"}, "not one of"), ({"aa": "a"}, "baseline of its own"), ({"base": "a", "aa": "a"}, "own"),
     ({"rounds": 0}, "at least one"), ({"order": "random"}, "alternate")],
)  # fmt: skip
def test_bad_arguments_are_named(kwargs, match):
    args = {"rounds": 2, **kwargs}
    with pytest.raises(ValueError, match=match):
        run_rounds({"a": lambda i: 1.0, "b": lambda i: 1.0}, args.pop("rounds"), **args)
