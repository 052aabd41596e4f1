"""CPU checks of ``python -m bench.auto_stability`` with fake workers (no GPU): the summary of the
runs, the exit codes, and the document it writes (suite.results' conventions)."""

from __future__ import annotations

import json
import os
import sys
import types

import pytest

from bench import auto_stability as stab
from bench.e2e.worker import RunFailed
from gpukit.decode_step import auto_pick
from suite.commands import MEASUREMENTS


PROFILE = {"version": 6, "decode_gather": {"version": 1, "entries": {"nvfp4:1048576": {"pick": "tma 8x3x16384"}}}}


def run(label="fast_index_copy_multi (blocks_per_bank=8)", entry=True, captured=0, timed=0, **kw):
    pick = {"label": label, "line": f"decode gather auto: runs {label}", "entry": {"pick": label} if entry else None}
    return {"pick": pick, "captured": captured, "timed": timed, "auto_set_bank_sources_s": 1.2,
            "unset_set_bank_sources_s": 1.1, **kw}  # fmt: skip


def test_summary_says_what_ran_whether_it_followed_the_profile_and_what_building_cost():
    s = stab.summarize([run(), run(), run("tma 16x4x8192", auto_set_bank_sources_s=1.5)])
    assert s["chosen"] == ["fast_index_copy_multi (blocks_per_bank=8)"] * 2 + ["tma 16x4x8192"]
    assert s["counts"] == {"fast_index_copy_multi (blocks_per_bank=8)": 2, "tma 16x4x8192": 1}
    assert s["same_every_time"] is False and s["followed_profile"] is True and s["captured_or_timed"] == 0
    assert s["auto_ms_max"] == pytest.approx(1500.0) and s["unset_ms_max"] == pytest.approx(1100.0)
    assert stab.summarize([run(), run(entry=False)])["followed_profile"] is False
    assert stab.summarize([run(captured=1), run(timed=2)])["captured_or_timed"] == 3


def test_auto_pick_reads_the_switch_and_leaves_the_launcher_out():
    pick = types.SimpleNamespace(label="tma 8x3x16384", launch=print, line="runs tma 8x3x16384", entry={"pick": "x"})
    cache = types.SimpleNamespace(_decode_gather_switch=types.SimpleNamespace(auto=pick))
    assert auto_pick(cache) == {"label": "tma 8x3x16384", "line": "runs tma 8x3x16384", "entry": {"pick": "x"}}
    assert auto_pick(types.SimpleNamespace(_decode_gather_switch=types.SimpleNamespace(auto=None))) is None
    assert auto_pick(types.SimpleNamespace()) is None  # a cache of a series without the switch


def test_counted_counts_captures_and_timings_and_puts_them_back():
    class Graph:
        def capture_begin(self):
            return "began"

    class Event:
        def elapsed_time(self, other):
            return 1.0

    torch = types.SimpleNamespace(cuda=types.SimpleNamespace(CUDAGraph=Graph, Event=Event))
    with stab.counted(torch) as seen:
        assert Graph().capture_begin() == "began" and Event().elapsed_time(None) == 1.0 and Event().elapsed_time(0)
    assert seen == {"captured": 1, "timed": 2}
    Graph().capture_begin()
    assert seen == {"captured": 1, "timed": 2} and Graph.capture_begin.__name__ == "capture_begin"


@pytest.fixture
def fake_workers(monkeypatch, tmp_path):
    monkeypatch.setenv("FT_RESULTS_DIR", str(tmp_path / "res"))
    monkeypatch.setattr("gpukit.skips.cuda_skip_reason", lambda: None)
    (tmp_path / "tmp").mkdir()
    monkeypatch.setattr(stab.tempfile, "tempdir", str(tmp_path / "tmp"))  # the default --log-dir goes there
    calls = []

    def install(make):
        def run_one(index, args, log_dir):
            calls.append(index)
            (log_dir / f"run{index}.log").write_text("worker log\n")  # as run_worker writes it
            out = make(index)
            if index == 0:
                out["machine"] = {"device_slug": "fake-gpu", "device_name": "Fake GPU"}
            return out

        monkeypatch.setattr(stab, "run_one", run_one)
        return calls

    def bench(path, args, log_dir):  # ft bench bw, as run_worker returns what it wrote
        calls.append("ft bench bw")
        path.write_text(json.dumps(PROFILE))
        return PROFILE

    monkeypatch.setattr(stab, "bench_profile", bench)

    return install


def test_main_writes_one_document_of_every_run(fake_workers, tmp_path):
    calls = fake_workers(lambda i: run())
    assert stab.main(["--runs", "5", "--log-dir", str(tmp_path / "logs")]) == stab.EXIT_OK
    doc = json.loads((tmp_path / "res" / "fake-gpu" / "auto_stability.json").read_text())
    assert calls == ["ft bench bw", 0, 1, 2, 3, 4] and len(doc["runs"]) == 5 and "machine" not in doc["runs"][0]
    assert doc["schema"] == MEASUREMENTS["auto_stability"].schema and doc["machine"]["device_slug"] == "fake-gpu"
    assert doc["summary"]["counts"] == {"fast_index_copy_multi (blocks_per_bank=8)": 5} and doc["errors"] == []
    assert doc["settings"]["profile"].endswith("/logs/benchbw.json") and doc["settings"]["runs"] == 5
    assert doc["settings"]["decode_gather"] == PROFILE["decode_gather"]  # the entries auto read
    given = tmp_path / "given.json"
    given.write_text(json.dumps(PROFILE))
    calls.clear()
    assert stab.main(["--runs", "1", "--profile", str(given), "--out", str(tmp_path / "o")]) == stab.EXIT_OK
    assert calls == [0]  # a given profile: no bench


def test_main_exit_codes(fake_workers, tmp_path):
    for differs in (dict(captured=2), dict(timed=1), dict(entry=False), dict(label="tma 16x4x8192")):
        fake_workers(lambda i: run(**differs) if i == 1 else run())
        assert stab.main(["--runs", "2", "--out", str(tmp_path / "o1")]) == stab.EXIT_DIFFERED, differs

    def failing(i):
        if i == 1:
            raise RuntimeError("run 1: worker exit 3")
        return run()

    fake_workers(failing)
    assert stab.main(["--runs", "3", "--out", str(tmp_path / "o2")]) == stab.EXIT_FAILED
    doc = json.loads((tmp_path / "o2" / "auto_stability.json").read_text())
    assert len(doc["runs"]) == 1 and doc["errors"] == ["run 1: worker exit 3"]


def test_a_failed_bench_runs_nothing(fake_workers, monkeypatch, tmp_path):
    calls = fake_workers(lambda i: run())

    def failed(path, args, log_dir):
        raise RunFailed("ft bench bw: worker exit 1")

    monkeypatch.setattr(stab, "bench_profile", failed)
    assert stab.main(["--runs", "2", "--out", str(tmp_path / "o")]) == stab.EXIT_FAILED
    doc = json.loads((tmp_path / "o" / "auto_stability.json").read_text())
    assert calls == [] and doc["runs"] == [] and doc["errors"] == ["ft bench bw: worker exit 1"]


def test_bad_settings_are_refused(capsys):
    for argv, msg in ((["--runs", "0"], "--runs 0"), (["--slots", "0"], "--slots 0"), (["--gib", "-1"], "--gib -1"),
                      (["--profile", "/nonexistent/p.json"], "--profile /nonexistent/p.json: no such file")):
        with pytest.raises(SystemExit):
            stab.main(argv)
        assert msg in capsys.readouterr().err


def test_run_worker_reads_the_result_or_says_why_not(tmp_path):
    from bench.e2e.harness import run_worker

    result, log = tmp_path / "r.json", tmp_path / "r.log"
    write = f"import json; json.dump({{'ok': 1}}, open({str(result)!r}, 'w')); print('done')"
    assert run_worker("t", [sys.executable, "-c", write], dict(os.environ), result, log, 60) == {"ok": 1}
    result.unlink()
    with pytest.raises(RunFailed, match=r"t: worker exit 3; log .*last lines:\nboom"):
        run_worker("t", [sys.executable, "-c", "print('boom'); raise SystemExit(3)"], dict(os.environ), result, log, 60)


def test_the_default_log_dir_is_removed_unless_a_run_failed(fake_workers, tmp_path):
    """Without --log-dir every run (nox -s test's too) left a /tmp/ft-auto-* directory; now only a failed run's
    logs stay, to read."""
    tmp = tmp_path / "tmp"
    fake_workers(lambda i: run())
    assert stab.main(["--runs", "2", "--out", str(tmp_path / "o1")]) == stab.EXIT_OK
    assert list(tmp.iterdir()) == []

    def failing(i):
        if i == 1:
            raise RuntimeError("run 1: worker exit 3")
        return run()

    fake_workers(failing)
    assert stab.main(["--runs", "2", "--out", str(tmp_path / "o2")]) == stab.EXIT_FAILED
    [kept] = tmp.iterdir()
    assert kept.name.startswith("ft-auto-")
    assert sorted(p.name for p in kept.iterdir()) == ["benchbw.json", "run0.log", "run1.log"]
