"""CPU checks of suite.models: every committed result document of each kind (results/, its history
included) reads through its model and round-trips (``from_doc(to_doc(x)) == x``), in the switch's words;
the one paired shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite import results
from suite.commands import MEASUREMENTS
from suite.models import MODELS, BenchRun, E2E, Paired, paired
from suite.results import REPO_ROOT
from suite.rounds import run_rounds
from suite.stats import Comparison, fresh_processes

RESULTS = REPO_ROOT / "results"
#: the words the switch does not use for a kernel (the names of before it; the committed documents were rewritten once)
OLD_WORDS = {"ours", "unset", "unset_aa", "versus_unset"}


def _committed(kind: str) -> list[Path]:
    """Every committed file of ``kind``: the current ones and the history the writer kept."""
    devices = [d.name for d in RESULTS.iterdir() if d.is_dir()]
    current = [results.path(kind, d).relative_to(results.root()) for d in devices] if MEASUREMENTS[kind].per_device else []
    found = [RESULTS / p for p in current if (RESULTS / p).is_file()]
    return sorted(set(found + [p for d in devices for p in results.history(kind, d, base=RESULTS)]))


CASES = [(kind, p) for kind in MODELS for p in _committed(kind)]


def _words(doc) -> set[str]:
    """Every key and string value of ``doc``."""
    if isinstance(doc, dict):
        return set(doc) | {w for v in doc.values() for w in _words(v)}
    if isinstance(doc, list):
        return {w for v in doc for w in _words(v)}
    return {doc} if isinstance(doc, str) else set()


@pytest.mark.parametrize("kind,path", CASES, ids=[str(p.relative_to(REPO_ROOT)) for _, p in CASES])
def test_every_committed_document_reads_through_its_model_and_round_trips(kind, path):
    doc = json.loads(path.read_text())
    assert doc["schema"] == MEASUREMENTS[kind].schema
    m = MODELS[kind].from_doc(doc)
    assert m.schema == doc["schema"] and m.provenance == doc.get("provenance")
    assert MODELS[kind].from_doc(m.to_doc()) == m
    assert not OLD_WORDS & _words(doc), f"{path}: a kernel named in the words of before the switch"


CURRENT = [(kind, REPO_ROOT / "results" / p) for kind, p in (
    ("gpu", "h200/conformance/gpu.json"), ("sanitize", "h200/conformance/sanitize.json"),
    ("auto_stability", "h200/auto_stability.json"))]


@pytest.mark.parametrize("kind,path", CURRENT, ids=[k for k, _ in CURRENT])
def test_a_document_of_the_current_writers_is_its_model_exactly(kind, path):
    """No key lost or renamed: what today's writers saved is what its model writes back (older files differ
    only where ``normalise`` renames their fields)."""
    doc = json.loads(path.read_text())
    assert MODELS[kind].from_doc(doc).to_doc() == doc


def test_every_kind_with_a_model_has_committed_files():
    assert {kind for kind, _ in CASES} == set(MODELS)


BENCH_FILES = _committed("bench")


@pytest.mark.parametrize("path", BENCH_FILES, ids=[str(p.relative_to(REPO_ROOT)) for p in BENCH_FILES])
def test_every_committed_benchmark_run_reads_into_rows_in_the_switchs_words(path):
    doc = json.loads(path.read_text())
    run = BenchRun.read(doc, path.name)
    assert run is not None and run.gather and BenchRun.from_doc(run.to_doc()) == run
    for row in run.gather:
        assert {"upstream", "tma"} <= set(row.us) and not {"ours", "unset"} & set(row.us)
        assert row.regime in ("decode", "replay")
    assert run.decode_step is None or "unset" not in run.decode_step.us_per_step


def test_the_committed_h200_benchmark_rows_are_its_paired_figures():
    pb = json.loads((REPO_ROOT / "results" / "h200" / "bench.json").read_text())
    run = BenchRun.read(pb, "h200/bench.json")
    rec = next(b for b in pb["benchmarks"] if b["params"]["regime"] == "decode" and b["params"]["n"] == 4)
    row = next(r for r in run.gather if (r.regime, r.n) == ("decode", 4))
    c, p = row.ratio["tma"], rec["extra_info"]["paired"]
    assert (c.ratio, c.ratio_paired, c.aa_spread, c.verdict, c.rule) == (
        p["ratio"]["tma"], p["ratio_paired"]["tma"], p["aa_spread"], p["verdict"]["tma"], "aa")
    assert row.bytes_per_layer == rec["extra_info"]["bytes"] // 40
    assert BenchRun.read({"schema": "something else"}, "x") is None


@pytest.mark.parametrize("name", ["e2e.json", "history/tree-a27e80500b0c/e2e.1.json"])
def test_a_committed_e2e_reads_with_a_ratio_for_each_arm_beside_upstream(name):
    doc = json.loads((REPO_ROOT / "results" / "h200" / name).read_text())
    e2e = E2E.from_doc(json.loads(json.dumps(doc)))
    point = e2e.points[0]
    assert {"upstream", "tma"} <= set(point.kernels) and set(point.ratio) == set(point.kernels) - {"upstream"}
    rates = {v: dict(enumerate(x["tokens_per_s"])) for v, x in point.kernels.items()}  # per repeat
    for k, c in point.ratio.items():  # the rule repeats over the point's own repeats
        assert c == fresh_processes(rates["upstream"], rates[k]) and c.rule == "repeats"
    ranges = [doc["points"][0]["kernels"][v]["tokens_per_s_range"] for v in ("upstream", "tma")]
    assert point.ratio["tma"].repeat_range == max(ranges) > 0
    assert E2E.from_doc(e2e.to_doc()) == e2e


def _rounds():
    times = {"upstream": [10.0, 10.0, 10.0], "upstream_aa": [10.0, 10.1, 9.9], "tma": [5.0, 5.0, 4.0]}
    return run_rounds({k: (lambda i, v=v: v[i]) for k, v in times.items()}, 3, base="upstream", aa="upstream_aa")


def test_paired_is_the_one_shape_of_a_case():
    p = paired(_rounds(), reps=20)
    assert (p.base, p.aa, p.rounds, p.order) == ("upstream", "upstream_aa", 3, "alternate")
    c = p.ratio["tma"]
    assert (c.ratio, c.ratio_paired, c.paired_min, c.paired_max, c.verdict, c.rule) == (2.0, 2.0, 2.0, 2.5, "faster", "aa")
    assert p.aa_ratios == pytest.approx([1.0, 10 / 10.1, 10 / 9.9]) and p.aa_ratio == 1.0
    assert p.aa_spread == pytest.approx(10 / 9.9 - 1) == c.aa_spread
    assert p.median_us == {"upstream": 10.0, "upstream_aa": 10.0, "tma": 5.0} and p.extra == {"reps": 20}
    doc = json.loads(json.dumps(p.to_doc()))  # as a writer saves it
    assert doc["reps"] == 20 and "extra" not in doc and Paired.from_doc(doc) == p and Paired.from_doc(doc).to_doc() == doc




def test_a_case_of_before_the_comparison_reads_as_the_writer_makes_it_now():
    """The shape of the committed runs ({kernel: ratio}, ratio_paired and verdict beside it) reads into the
    Comparison today's writer makes from the same rounds."""
    p = paired(_rounds())
    c = p.ratio["tma"]
    old = {**p.to_doc(), "ratio": {"tma": c.ratio}, "ratio_paired": {"tma": c.ratio_paired}, "verdict": {"tma": c.verdict}}
    assert Paired.from_doc(old).ratio == {"tma": c}
    stale = {**old, "verdict": {}}  # no verdict stored: the rule of the ratio and the A/A spread
    assert Paired.from_doc(stale).ratio["tma"] == c
    assert Comparison.from_doc(c.to_doc()) == c and c.to_doc()["rule"] == "aa"


def test_faster_and_slower_only_beyond_the_margin_whatever_a_document_stored():
    """Both rules call a gap within max(its noise, MARGIN) a tie; a Comparison read back from a document decides its
    verdict by the rule again, so one stored by an older rule (A/A alone) is not what the pages say."""
    from suite.stats import MARGIN, verdict

    inside, outside = 1 + 0.9 * MARGIN, 1 + 1.1 * MARGIN
    assert verdict(inside, 0.0) == verdict(2 - inside, MARGIN / 2) == "tie"
    assert verdict(outside, MARGIN / 2) == "faster" and verdict(2 - outside, MARGIN / 2) == "slower"
    assert verdict(outside, 2 * MARGIN) == "tie"  # a wider A/A spread decides
    stored = {"ratio": inside, "aa_spread": 0.001, "verdict": "faster", "rule": "aa"}
    assert Comparison.from_doc(stored).verdict == "tie" and Comparison.from_doc(stored).to_doc()["verdict"] == "tie"
    assert Comparison(outside, aa_spread=0.001, verdict="tie").verdict == "faster"
    same = {0: 100.0, 1: 100.1}  # repeats 0.1% apart
    assert fresh_processes(same, {r: x * inside for r, x in same.items()}).verdict == "tie"
    assert fresh_processes(same, {r: x * outside for r, x in same.items()}).verdict == "faster"
    assert fresh_processes(same, {r: x * (2 - outside) for r, x in same.items()}).verdict == "slower"
