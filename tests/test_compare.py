"""CPU checks of report/compare.py's units against pytest-benchmark's (issue 34): 40.7 µs and 1.629 ms were the same
case, one per layer, the other the whole graph, and neither output said which."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

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


def _store() -> Path:
    return next(p for s in results.devices(RESULTS) if (p := RESULTS / s / MEASUREMENTS["bench"].file).is_file())


def test_two_saved_runs_side_by_side_each_row_under_its_runs_name(tmp_path: Path, capsys) -> None:
    """Not pytest-benchmark's "(benc)" for both: each row names its run, each case's rows together, each run's own
    figures under its name (the older run's tma made twice as slow in one case here)."""
    pb = json.loads(_store().read_text())
    new, old = tmp_path / "h200/bench.json", tmp_path / "h200/history/tree-abc/bench.1.json"
    new.parent.mkdir(parents=True)
    new.write_text(json.dumps(pb))
    slow = next(b for b in pb["benchmarks"] if b["params"]["kernel"] == "tma" and b["params"]["regime"] != "step")
    slow["stats"]["median"] *= 2
    old.parent.mkdir(parents=True)
    old.write_text(json.dumps(pb))
    assert compare.main([str(old), str(new)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith("history/tree-abc/bench.1: ") and out[1].startswith("bench: ")
    rows = [line.split() for line in out[out.index(next(x for x in out if x.startswith("run "))) + 2:]]
    assert [r[0] for r in rows] == ["history/tree-abc/bench.1", "bench"] * (len(rows) // 2)
    assert all(a[1:4] == b[1:4] for a, b in zip(rows[::2], rows[1::2]))
    p = slow["params"]
    old_row, new_row = (next(r for r in rows if r[0] == name and r[1:4] == [p["regime"], str(p["layers"]), str(p["n"])])
                        for name in ("history/tree-abc/bench.1", "bench"))  # fmt: skip
    us = float(new_row[6].replace(",", ""))
    assert abs(float(old_row[6].replace(",", "")) - 2 * us) <= 0.002 + 1e-3 * us
    assert compare.main(["--csv", str(new), str(old)]) == 0
    names = [line.split(",")[0] for line in capsys.readouterr().out.splitlines()]
    assert names[0] == "run" and set(names[1:]) == {"bench", "history/tree-abc/bench.1"}


def test_runs_in_two_folders_are_named_by_their_folders(tmp_path: Path, capsys) -> None:
    for slug in ("h200", "h100"):
        (tmp_path / slug).mkdir()
        (tmp_path / slug / "bench.json").write_text(_store().read_text())
    assert compare.main(["--csv", str(tmp_path / "h200/bench.json"), str(tmp_path / "h100/bench.json")]) == 0
    assert {line.split(",")[0] for line in capsys.readouterr().out.splitlines()[1:]} == {"h200/bench", "h100/bench"}


@pytest.mark.integration
def test_a_reader_that_stops_early_ends_it_quietly() -> None:
    """``python -m report.compare --csv | head`` printed a BrokenPipeError traceback: here the pipe's reading end is
    closed before the command writes a byte, so its every write meets a closed pipe."""
    read, write = os.pipe()
    os.close(read)
    with os.fdopen(write, "wb") as out:
        cmd = [sys.executable, "-m", "report.compare", "--csv", "--results", str(RESULTS)]
        proc = subprocess.run(cmd, cwd=REPO_ROOT, stdout=out, stderr=subprocess.PIPE, text=True, timeout=120, check=False)
    assert proc.stderr == "" and proc.returncode == -signal.SIGPIPE, (proc.returncode, proc.stderr)
