"""CPU checks of suite.migrate: the names and shapes of before the Comparison become today's, once, figures kept;
the committed documents are in today's names and shapes."""

from __future__ import annotations

import json
from dataclasses import replace

from suite import migrate
from suite.commands import MEASUREMENTS
from suite.models import E2E
from suite.models.docs import ring_choice
from suite.results import REPO_ROOT, dumps
from suite.stats import Comparison

OLD = """{
 "points": [
  {
   "speedup": 1.01,
   "speedup_paired": [1.0, 1.02],
   "speedup_paired_min": 1.0,
   "speedup_paired_max": 1.02,
   "variants": {"upstream": {"tokens_per_s_spread": 0.03}},
   "auto": {"speed": {"tma 16x4x8192": 1.01}, "spread": 0.03, "bar": 1.03, "reason": "no candidate faster than the bar"}
  }
 ],
 "summary": {"spread_max": 0.03},
 "paired": {"order": "alternating", "ratio": {"tma": 1.0}},
 "method": {"tie": "|speedup - 1| <= A/A spread", "order": "alternating rounds"}
}
"""


def test_old_names_are_renamed_once_and_the_rest_kept(tmp_path):
    path = tmp_path / "h200" / "e2e.json"
    path.parent.mkdir()
    path.write_text(OLD)
    assert migrate.migrate([tmp_path]) == [path]
    new = path.read_text()
    assert len(new.splitlines()) == len(OLD.splitlines())  # the formatting as it was
    doc = json.loads(new)
    point = doc["points"][0]
    assert (point["ratio"], point["ratio_paired"], point["ratio_paired_min"], point["ratio_paired_max"]) == (1.01, [1.0, 1.02], 1.0, 1.02)
    assert point["kernels"]["upstream"] == {"tokens_per_s_range": 0.03} and doc["paired"]["order"] == "alternate"
    assert point["auto"] == {"ratio": {"tma 16x4x8192": 1.01}, "aa_spread": 0.03, "threshold": 1.03,
                             "reason": "no candidate faster than the bar"}  # an older start-up probe's choice
    assert doc["summary"] == {"aa_spread_max": 0.03}
    assert doc["method"] == json.loads(OLD)["method"]  # values that are prose stay as recorded
    assert migrate.migrate([tmp_path]) == [] and path.read_text() == new  # idempotent


def test_a_series_bench_run_without_a_ring_choice_gets_the_one_its_rows_give(tmp_path):
    row = {"n": 1, "median_us": {"upstream": 10.0, "tma": 9.0, "tma_4x4x16384": 8.0}, "aa_spread": 0.01}
    doc = {"schema": MEASUREMENTS["series_bench"].schema, "tma_ring": "8x3x16384", "args": {"variant": "auto"},
           "geometries": [{"model": "m", "rows": [{**row, "n": 0}, row]}]}  # fmt: skip
    path = tmp_path / "h200" / "series_bench.json"
    path.parent.mkdir()
    path.write_text(dumps(doc))
    assert migrate.migrate([tmp_path]) == [path]
    choice = json.loads(path.read_text())["ring_choice"]
    assert json.loads(path.read_text())["args"] == {"variant": "auto"}  # the series' own option, as it ran
    assert choice["default"] == "8x3x16384" and choice["best"] == "4x4x16384"
    assert choice["scores"] == {"4x4x16384": {"geomean": 9.0 / 8.0, "rows": 1, "wins": 1, "losses": 0}}  # n = 0 left out
    assert migrate.migrate([tmp_path]) == []  # idempotent
    path.write_text(dumps({**doc, "geometries": [{"model": "m", "rows": [{**row, "median_us": {"tma": 9.0}}]}]}))
    assert migrate.migrate([tmp_path]) == []  # no ring timed: nothing to add


def test_the_ring_choice_takes_the_fastest_ring_that_wins_a_row_and_loses_none():
    """At the link ceiling most rows tie: one win beyond the A/A spread and no loss make a ring eligible."""
    tma = 100.0
    times = {"a": (99.0, 100.3, 100.3), "b": (99.6, 99.6, 99.6), "c": (98.0, 101.0, 100.0)}  # b: ties only
    rows = [{"n": 1, "aa_spread": 0.001, "median_us": {"tma": tma, **{f"tma_{k}": v[i] for k, v in times.items()}}}
            for i in range(3)]  # fmt: skip
    choice = ring_choice({"tma_ring": "8x3x16384", "geometries": [{"rows": rows}]})
    assert {k: (s["wins"], s["losses"]) for k, s in choice["scores"].items()} == {"a": (1, 0), "b": (0, 0), "c": (1, 1)}
    assert choice["scores"]["b"]["geomean"] > choice["scores"]["a"]["geomean"] and choice["best"] == "a"


def test_an_e2e_point_of_before_the_comparison_gets_each_kernels_comparison(tmp_path):
    """... and the runs of before the word kernel (``variant``, ``variant_env``) get it."""
    arm = {"ratio": 1.02, "ratio_paired": [1.01, 1.03, 1.05], "ratio_paired_min": 1.01, "ratio_paired_max": 1.05,
           "verdict": "faster"}  # fmt: skip
    variants = {"upstream": {"tokens_per_s_range": 0.004}, "tma": {"tokens_per_s_range": 0.008},
                "auto": {"tokens_per_s_range": 0.002}}  # fmt: skip
    points = [{"slots": 1, "variants": variants, **arm, "versus_upstream": {"tma": arm, "auto": {**arm, "ratio": 0.99}}},
              {"slots": 2, "variants": variants, **arm}]  # tma's figures at the top level, the older shape
    path = tmp_path / "e2e.json"
    runs = [{"repeat": 0, "point": 0, "variant": "tma", "variant_env": "tma", "tokens_per_s": 1.0}]
    path.write_text(dumps({"schema": MEASUREMENTS["e2e"].schema, "points": points, "runs": runs}))
    assert migrate.migrate([tmp_path]) == [path] and migrate.migrate([tmp_path]) == []
    e2e = E2E.from_doc(json.loads(path.read_text()))
    assert e2e.runs == [{"repeat": 0, "point": 0, "kernel": "tma", "kernel_env": "tma", "tokens_per_s": 1.0}]
    want = Comparison(1.02, 1.03, 1.01, 1.05, repeat_range=0.008, verdict="faster", rule="repeats")
    assert [p.ratio for p in e2e.points] == [{"tma": want, "auto": replace(want, ratio=0.99, repeat_range=0.004)},
                                             {"tma": want}] and not e2e.points[0].extra  # fmt: skip


def test_the_committed_documents_are_in_todays_names():
    stale = [p for d in ("results", "experiments/results") for p in (REPO_ROOT / d).rglob("*.json")
             if migrate.migrate_text(p.read_text()) != p.read_text()]
    assert not stale, f"run python -m suite.migrate: {stale[:3]}"
