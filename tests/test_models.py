"""CPU checks of suite.models: every committed result document of each kind reads through its model and
round-trips (``from_doc(to_doc(x)) == x``); older shapes read in the current names; the one paired shape."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from suite import results
from suite.models import MODELS, BenchRun, E2E, Paired, StepPdl, paired
from suite.results import REPO_ROOT

#: {kind: the names its files are kept under in results/ and experiments/results/}
FILES = {"ceiling": ("ceiling*.json",), "conformance": ("summary.json", "conformance-summary*.json"),
         "sanitizer": ("sanitizer.json",), "step_pdl": ("step_pdl*.json",), "contention": ("contention*.json",),
         "series_bench": ("series_bench*.json", "upstream_bench*.json"), "e2e": ("e2e*.json",),
         "auto_stability": ("auto_stability*.json",)}  # fmt: skip
ROOTS = (REPO_ROOT / "results", REPO_ROOT / "experiments" / "results")


def _committed(globs) -> list[Path]:
    return sorted({p for root in ROOTS for g in globs for p in root.rglob(g)})


CASES = [(kind, p) for kind, globs in FILES.items() for p in _committed(globs)]


@pytest.mark.parametrize("kind,path", CASES, ids=[str(p.relative_to(REPO_ROOT)) for _, p in CASES])
def test_every_committed_document_reads_through_its_model_and_round_trips(kind, path):
    doc = json.loads(path.read_text())
    assert doc["schema"] == results.KINDS[kind].schema
    m = MODELS[kind].from_doc(doc)
    assert m.schema == doc["schema"] and m.provenance == doc.get("provenance")
    assert MODELS[kind].from_doc(m.to_doc()) == m


CURRENT = [(kind, REPO_ROOT / "results" / p) for kind, p in (
    ("conformance", "h200/conformance/summary.json"), ("sanitizer", "h200/conformance/sanitizer.json"),
    ("step_pdl", "h200/step_pdl.json"), ("e2e", "h200/e2e.json"), ("auto_stability", "h200/auto_stability.json"))]


@pytest.mark.parametrize("kind,path", CURRENT, ids=[k for k, _ in CURRENT])
def test_a_document_of_the_current_writers_is_its_model_exactly(kind, path):
    """No key lost or renamed: what today's writers saved is what its model writes back (older files differ
    only where ``normalise`` renames their fields)."""
    doc = json.loads(path.read_text())
    assert MODELS[kind].from_doc(doc).to_doc() == doc


def test_every_kind_with_a_model_has_committed_files():
    assert {kind for kind, _ in CASES} == set(MODELS)


BENCH_FILES = _committed(("pytest-benchmark*.json", "bench*.json"))


@pytest.mark.parametrize("path", BENCH_FILES, ids=[str(p.relative_to(REPO_ROOT)) for p in BENCH_FILES])
def test_every_committed_benchmark_run_reads_into_rows_in_the_switchs_words(path):
    doc = json.loads(path.read_text())
    run = BenchRun.read(doc, path.name)
    if "schema" not in doc:  # pytest-benchmark's JSON before the store added its schema id: not read, as before
        assert run is None
        return
    assert run is not None and run.gather and BenchRun.from_doc(run.to_doc()) == run
    for row in run.gather:
        assert {"upstream", "tma"} <= set(row.us) and not {"ours", "unset"} & set(row.us)
        assert row.regime in ("decode", "replay")
    assert run.decode_step is None or "unset" not in run.decode_step.us_per_step


def test_the_committed_h200_benchmark_rows_are_its_paired_figures():
    pb = json.loads((REPO_ROOT / "results" / "h200" / "pytest-benchmark.json").read_text())
    run = BenchRun.read(pb, "h200/pytest-benchmark.json")
    rec = next(b for b in pb["benchmarks"] if b["params"]["regime"] == "decode" and b["params"]["n"] == 4)
    row = next(r for r in run.gather if (r.regime, r.n) == ("decode", 4))
    assert row.speedup == rec["extra_info"]["paired"]["ratio"]["tma"]
    assert row.aa_spread == rec["extra_info"]["paired"]["aa_spread"]
    assert row.bytes_per_layer == rec["extra_info"]["bytes"] // 40
    assert BenchRun.read({"schema": "something else"}, "x") is None


def test_an_older_e2e_names_the_upstream_arm_upstream():
    doc = json.loads((REPO_ROOT / "experiments" / "results" / "h200" / "tree-cea31ee84447" / "e2e.3.json").read_text())
    assert "unset" in doc["points"][0]["variants"]  # the file as measured: the harness's old name
    e2e = E2E.from_doc(doc)
    assert set(e2e.points[0].variants) == {"upstream", "tma"}
    assert e2e.points[0].variants["upstream"] == doc["points"][0]["variants"]["unset"]
    assert {r["variant"] for r in e2e.runs} == {"upstream", "tma"} and set(e2e.settings["variants"]) == {"upstream", "tma"}


def test_the_committed_e2e_has_its_three_arms_and_their_ratios():
    doc = json.loads((REPO_ROOT / "results" / "h200" / "e2e.json").read_text())
    e2e = E2E.from_doc(doc)
    point = e2e.points[0]
    assert set(point.variants) == {"upstream", "tma", "auto"} and set(point.versus_upstream) == {"tma", "auto"}
    assert point.speedup == doc["points"][0]["versus_upstream"]["tma"]["speedup"]
    assert E2E.from_doc(e2e.to_doc()) == e2e


def test_the_older_step_pdl_shape_reads_in_the_switchs_words():
    doc = json.loads((REPO_ROOT / "experiments" / "results" / "h200" / "tree-cea31ee84447" / "step_pdl.2.json").read_text())
    step = StepPdl.from_doc(doc)
    assert doc["decode_step"]["median_us"]["unset"] == step.decode_step.median_us["upstream"]
    assert "upstream_aa" in step.decode_step.breakdown and "unset" not in step.decode_step.breakdown
    n0 = step.per_layer["0"]
    assert n0.base == "upstream" and n0.median_us["upstream"] == doc["per_layer"]["0"]["median_us"]["unset"]
    assert n0.extra == {"verified_sets": doc["per_layer"]["0"]["verified_sets"]}


def test_paired_is_the_one_shape_of_a_case():
    rounds = {"upstream": [10.0, 10.0, 10.0], "upstream_aa": [10.0, 10.1, 9.9], "tma": [5.0, 5.0, 4.0]}
    p = paired(rounds, ["tma"], reps=20)
    assert (p.base, p.aa, p.rounds, p.order) == ("upstream", "upstream_aa", 3, "alternating")
    assert p.ratio == {"tma": 2.0} and p.ratio_paired == {"tma": 2.0} and p.verdict == {"tma": "faster"}
    assert p.aa_ratios == pytest.approx([1.0, 10 / 10.1, 10 / 9.9]) and p.aa_ratio == 1.0
    assert p.aa_spread == pytest.approx(10 / 9.9 - 1)
    assert p.median_us == {"upstream": 10.0, "upstream_aa": 10.0, "tma": 5.0} and p.extra == {"reps": 20}
    doc = p.to_doc()
    assert doc["reps"] == 20 and "extra" not in doc and Paired.from_doc(doc) == p
    old = {"median_us": {"unset": 1.0, "unset_aa": 1.0, "ours": 0.5}, "ratio": {"ours": 2.0}, "aa_spread": 0.01}
    assert Paired.from_doc(old).median_us == {"upstream": 1.0, "upstream_aa": 1.0, "tma": 0.5}


def test_the_probe_kind_has_no_results_path_its_writer_names_the_file():
    assert results.KINDS["probe"].file is None and not results.KINDS["probe"].per_device
    with pytest.raises(ValueError, match="named by their writer"):
        results.path("probe")
    assert results.load("probe") is None
    assert results.document("probe", x=1)["schema"] == "freetoken-decode-gather-probe/1"
