"""CPU checks of ``python -m bench.auto_stability`` with fake workers (no GPU): the summary of the
runs, the exit codes, and the document it writes (suite.results' conventions)."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import types

import pytest

from bench import auto_stability as stab
from bench.e2e.worker import auto_choice
from gpukit.decode_step import choice_fields
from suite import results
from suite.commands import MEASUREMENTS


def choice(label="bpb8", default="bpb8", probe_s=0.07, spread=0.004):
    return {"label": label, "default": default, "reason": "r", "speed": {"tma 16x4x8192": 0.998}, "spread": spread,
            "left_out": {}, "misses": 32, "layers": 40, "load_s": 0.002, "probe_s": probe_s}  # fmt: skip


def run(label="bpb8", again="bpb8", changed=(), leaked=0, probe_s=0.07, **kw):
    return {"choice": choice(label, probe_s=probe_s), "again": choice(again, probe_s=probe_s + 0.01),
            "again_wall_s": 0.09, "again_changed": list(changed), "again_allocated_bytes": leaked,
            "set_bank_sources_s": 1.0, **kw}  # fmt: skip


def test_summary_counts_both_probes_of_every_run():
    s = stab.summarize([run(probe_s=0.06), run(probe_s=0.08), run("tma 16x4x8192", probe_s=0.07)])
    assert s["chosen"] == ["bpb8", "bpb8", "tma 16x4x8192"] and s["chosen_again"] == ["bpb8"] * 3
    assert s["counts"] == {"bpb8": 5, "tma 16x4x8192": 1}
    assert s["same_every_time"] is False and s["kept_default_every_time"] is False
    assert s["probe_ms_min"] == pytest.approx(60.0) and s["probe_ms_max"] == pytest.approx(90.0)
    assert s["cache_left_as_found"] is True and s["spread_max"] == pytest.approx(0.004)
    steady = stab.summarize([run(), run()])
    assert steady["same_every_time"] is True and steady["kept_default_every_time"] is True
    assert stab.summarize([run(), run(leaked=512)])["cache_left_as_found"] is False
    assert stab.summarize([run(changed=["slot_for_id"])])["cache_left_as_found"] is False


def test_choice_fields_leave_the_launcher_out():
    @dataclasses.dataclass
    class Choice:
        label: str
        launch: object
        reason: str

    c = Choice("bpb8", print, "tie")
    assert choice_fields(c) == {"label": "bpb8", "reason": "tie"}
    assert auto_choice(types.SimpleNamespace(decode_gather_auto=c)) == {"label": "bpb8", "reason": "tie"}
    assert auto_choice(types.SimpleNamespace(decode_gather_auto=None)) is None


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

    return install


def test_main_writes_one_document_of_every_run(fake_workers, tmp_path):
    calls = fake_workers(lambda i: run())
    assert stab.main(["--runs", "5", "--log-dir", str(tmp_path / "logs")]) == stab.EXIT_OK
    doc = json.loads((tmp_path / "res" / "fake-gpu" / "auto_stability.json").read_text())
    assert calls == [0, 1, 2, 3, 4] and len(doc["runs"]) == 5 and "machine" not in doc["runs"][0]
    assert doc["schema"] == MEASUREMENTS["auto_stability"].schema and doc["machine"]["device_slug"] == "fake-gpu"
    assert doc["summary"]["counts"] == {"bpb8": 10} and doc["settings"]["runs"] == 5 and doc["errors"] == []


def test_main_exit_codes(fake_workers, tmp_path):
    fake_workers(lambda i: run(changed=["bank gate_up_packed"] if i == 1 else ()))
    assert stab.main(["--runs", "2", "--out", str(tmp_path / "o1")]) == stab.EXIT_CHANGED

    def failing(i):
        if i == 1:
            raise RuntimeError("run 1: worker exit 3")
        return run()

    fake_workers(failing)
    assert stab.main(["--runs", "3", "--out", str(tmp_path / "o2")]) == stab.EXIT_FAILED
    doc = json.loads((tmp_path / "o2" / "auto_stability.json").read_text())
    assert len(doc["runs"]) == 1 and doc["errors"] == ["run 1: worker exit 3"]


def test_bad_settings_are_refused(capsys):
    for argv, msg in ((["--runs", "0"], "--runs 0"), (["--slots", "0"], "--slots 0"), (["--gib", "-1"], "--gib -1")):
        with pytest.raises(SystemExit):
            stab.main(argv)
        assert msg in capsys.readouterr().err


def test_run_worker_reads_the_result_or_says_why_not(tmp_path):
    from bench.e2e.harness import RunFailed, run_worker

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
    assert kept.name.startswith("ft-auto-") and sorted(p.name for p in kept.iterdir()) == ["run0.log", "run1.log"]
