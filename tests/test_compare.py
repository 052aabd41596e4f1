"""CPU checks of report/compare.py's units against pytest-benchmark's (issue 34): 40.7 µs and 1.629 ms were the same
case, one per layer, the other the whole graph, and neither output said which."""

from __future__ import annotations

import json

from report import compare
from suite import results
from suite.commands import MEASUREMENTS
from freetoken_overlay.util import REPO_ROOT

RESULTS = REPO_ROOT / "results"


def test_compare_states_its_unit(capsys) -> None:
    assert compare.main(["--results", str(RESULTS)]) == 0
    out = capsys.readouterr().out
    assert compare.UNITS in out.splitlines() and "µs per layer" in compare.UNITS and "the whole graph" in compare.UNITS


def test_the_stated_units_hold_on_the_saved_runs(capsys) -> None:
    """Per layer = pytest-benchmark's round median / layers, as printed; the decode step's is not divided."""
    checked = 0
    for slug in results.devices(RESULTS):
        store = RESULTS / slug / MEASUREMENTS["bench"].file
        if not store.is_file():
            continue
        checked += 1
        assert compare.main(["--results", str(RESULTS), "--device", slug, "--csv"]) == 0
        rows = {(r[1], r[2], r[3]): r for r in (line.split(",") for line in capsys.readouterr().out.splitlines()[1:])}
        for record in json.loads(store.read_text())["benchmarks"]:
            info = record["extra_info"]
            if info["kernel"] != "upstream":
                continue
            us = record["stats"]["median"] * 1e6
            if info["regime"] == "step":
                row = next(r for k, r in rows.items() if k[0] == "decode step")
                assert abs(float(row[4]) - us) < 1e-6 * us
            else:
                row = rows[(info["regime"], str(info["layers"]), str(info["n"]))]
                assert abs(float(row[4]) * info["layers"] - us) < 1e-6 * us
    assert checked, "no device's benchmark store was checked"
