"""CPU checks of suite.migrate: the names of before the Comparison become today's, once, figures and formatting
kept; the committed documents are in today's names."""

from __future__ import annotations

import json

from suite import migrate
from suite.results import REPO_ROOT

OLD = """{
 "points": [
  {
   "speedup": 1.01,
   "speedup_paired": [1.0, 1.02],
   "speedup_paired_min": 1.0,
   "speedup_paired_max": 1.02,
   "variants": {"upstream": {"tokens_per_s_spread": 0.03}}
  }
 ],
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
    assert point["variants"]["upstream"] == {"tokens_per_s_range": 0.03} and doc["paired"]["order"] == "alternate"
    assert doc["method"] == json.loads(OLD)["method"]  # values that are prose stay as recorded
    assert migrate.migrate([tmp_path]) == [] and path.read_text() == new  # idempotent


def test_the_committed_documents_are_in_todays_names():
    stale = [p for d in ("results", "experiments/results") for p in (REPO_ROOT / d).rglob("*.json")
             if migrate.migrate_text(p.read_text()) != p.read_text()]
    assert not stale, f"run python -m suite.migrate: {stale[:3]}"
