"""CPU checks of the end-to-end A/B harness's own logic, with fake workers (no GPU, no engine):
the run order, slot points, the summary statistics, the stop rules and exit codes, the document."""

from __future__ import annotations

import argparse
import json
import types

import pytest

from helpers import fake_result, make_model_dir, ring_launcher, upstream_launcher
from bench.e2e import harness
from bench.e2e.__main__ import build_parser
from bench.e2e.worker import copy_grid, copy_kernel, expected_kernel, ids_sha256
from suite.stats import relative_range


def test_schedule_alternates_the_first_variant_and_keeps_repeats_whole():
    plan = harness.schedule(points=2, repeats=3)
    assert len(plan) == 12
    assert plan[:4] == [(0, 0, "upstream"), (0, 0, "tma"), (0, 1, "tma"), (0, 1, "upstream")]
    assert plan[4:6] == [(1, 0, "tma"), (1, 0, "upstream")]
    for r in range(3):
        for p in range(2):
            assert sorted(v for rr, pp, v in plan if (rr, pp) == (r, p)) == ["tma", "upstream"]
    firsts = [plan[i][2] for i in range(0, 12, 2)]
    assert firsts.count("upstream") == firsts.count("tma") == 3


def test_summary_statistics_and_verdicts():
    runs = []
    for r, (u, t) in enumerate(((100.0, 101.0), (102.0, 103.5), (99.0, 100.0))):
        runs += [{"repeat": r, "point": 0, "kernel": "upstream", **fake_result(u)},
                 {"repeat": r, "point": 0, "kernel": "tma", **fake_result(t)}]  # fmt: skip
    s = harness.summarize_point({"slots": 948}, 0, runs)
    upstream, tma = s["kernels"]["upstream"], s["kernels"]["tma"]
    assert upstream["tokens_per_s"] == [100.0, 102.0, 99.0] and upstream["tokens_per_s_median"] == 100.0
    assert upstream["tokens_per_s_range"] == pytest.approx(3.0 / 100.0)
    assert tma["tokens_per_s_median"] == 101.0
    c = s["ratio"]["tma"]
    assert c.ratio == pytest.approx(1.01) and c.rule == "repeats"
    assert (c.paired_min, c.ratio_paired, c.paired_max) == pytest.approx([1.01, 100.0 / 99.0, 103.5 / 102.0])
    assert c.repeat_range == pytest.approx(max(3.0 / 100.0, 3.5 / 101.0))  # the larger of the two kernels' ranges
    # every repeat faster, but 1 % is inside the repeats' own 3 % range
    assert c.verdict == "tie" and s["ids_identical"] is True and s["miss_counts_identical"] is True

    def verdict(runs):
        return harness.summarize_point({"slots": 948}, 0, runs)["ratio"]["tma"].verdict

    tight = [dict(x, tokens_per_s=(100.0 + x["repeat"] * 0.2) * (1.05 if x["kernel"] == "tma" else 1.0)) for x in runs]
    assert verdict(tight) == "faster"  # 5 % against 0.4 %
    slow = [dict(x, tokens_per_s=(100.0 + x["repeat"] * 0.2) * (0.95 if x["kernel"] == "tma" else 1.0)) for x in runs]
    assert verdict(slow) == "slower"
    runs[1]["tokens_per_s"] = 99.0  # one repeat slower: the paired ratios straddle 1
    assert verdict(runs) == "tie"
    runs[1]["misses_total"] = 101
    assert harness.summarize_point({"slots": 948}, 0, runs)["miss_counts_identical"] is False
    assert relative_range([5.0]) is None
    runs[0]["step_ms"] = {"p10": 0.9, "p50": 1.0, "p90": 1.4}  # a worker's interval quantiles, repeat 0
    upstream = harness.summarize_point({"slots": 948}, 0, runs)["kernels"]["upstream"]
    assert upstream["step_ms_p50"] == [1.0, None, None] and upstream["step_ms_p90"] == [1.4, None, None]


def test_ids_mismatch_is_found_per_repeat_and_point():
    runs = [
        {"repeat": 0, "point": 0, "kernel": "upstream", "ids_sha256": "x"},
        {"repeat": 0, "point": 0, "kernel": "tma", "ids_sha256": "x"},
        {"repeat": 1, "point": 0, "kernel": "tma", "ids_sha256": "y"},  # its pair has not run yet
        {"repeat": 0, "point": 1, "kernel": "tma", "ids_sha256": "p"},
        {"repeat": 0, "point": 1, "kernel": "upstream", "ids_sha256": "q"},
    ]
    assert harness.ids_mismatches(runs) == [{"repeat": 0, "point": 1, "tma": "p", "upstream": "q"}]


class FakeRunner:
    """Returns canned results; ``bad`` = (repeat, point, kernel) that generates other ids."""

    def __init__(self, bad=None, fail=None) -> None:
        self.calls, self.bad, self.fail = [], bad, fail

    def __call__(self, repeat, point, kernel, p):
        self.calls.append((repeat, point, kernel))
        if (repeat, point, kernel) == self.fail:
            raise harness.RunFailed("worker exit 3")
        sha = "b" * 64 if (repeat, point, kernel) == self.bad else "a" * 64
        return fake_result(100.0 + repeat + (1.0 if kernel == "tma" else 0.0), sha)


def run_execute(runner, **kw):
    updates = []
    code = harness.execute([{"slots": 900}, {"slots": 400}], 3, runner,
                           on_update=lambda runs, complete, errors: updates.append((len(runs), complete, list(errors))), **kw)  # fmt: skip
    return code, updates


def test_execute_all_identical_is_exit_0_and_complete():
    runner = FakeRunner()
    code, updates = run_execute(runner)
    assert code == harness.EXIT_OK and len(runner.calls) == 12
    assert updates[-1] == (12, True, []) and not any(c for _, c, _ in updates[:-1])


def test_execute_stops_at_the_first_ids_difference_with_exit_1():
    runner = FakeRunner(bad=(1, 0, "upstream"))  # repeat 2, point 0: tma runs first, upstream differs
    code, updates = run_execute(runner)
    assert code == harness.EXIT_IDS_DIFFER == 1
    assert runner.calls[-1] == (1, 0, "upstream") and len(runner.calls) == 6
    assert updates[-1][1] is False and "ids differ" in updates[-1][2][0]


def test_execute_failed_run_and_time_budget_are_exit_2():
    code, updates = run_execute(FakeRunner(fail=(0, 1, "tma")))
    assert code == harness.EXIT_FAILED and "worker exit 3" in updates[-1][2][0]
    ticks = iter(range(0, 10_000, 100))  # every clock read advances 100 s
    code, updates = run_execute(FakeRunner(), budget_s=450, clock=lambda: next(ticks))
    assert code == harness.EXIT_FAILED and updates[-1][1] is False and "time budget" in updates[-1][2][0]


def test_points_from_miss_rates_or_slots(tmp_path):
    model = str(make_model_dir(tmp_path))
    pts = harness.resolve_points(model, None, None)
    assert [p["target_miss_rate"] for p in pts] == [0.1, 0.3]
    assert [p["slots"] for p in pts] == [51, 35]  # 0.12 at 48 .. 0.0 at 64; 0.35 at 32 .. 0.12 at 48
    assert harness.resolve_points(model, [40], None)[0] == {"slots": 40, "target_miss_rate": None,
                                                           "predicted_miss_rate": pytest.approx(0.235)}  # fmt: skip
    with pytest.raises(ValueError, match="not both"):
        harness.resolve_points(model, [40], [0.1])
    with pytest.raises(ValueError, match=r"num_experts=16 slots"):
        harness.check_points([{"slots": 8}], 16)
    (tmp_path / "real").mkdir()
    real = str(make_model_dir(tmp_path / "real", with_sidecar=False))
    with pytest.raises(ValueError, match=r"pass --slots K"):
        harness.resolve_points(real, None, [0.1])
    assert harness.resolve_points(real, [3164], None)[0]["predicted_miss_rate"] is None


def run_main(tmp_path, monkeypatch, runner, argv=()):
    model = make_model_dir(tmp_path)
    monkeypatch.setattr(harness, "worker_runner", lambda args, log_dir: runner)
    monkeypatch.setenv("FT_RESULTS_DIR", str(tmp_path / "out"))  # results/<device>/e2e.json under tmp_path
    args = build_parser().parse_args(["run", "--model", str(model), "--log-dir", str(tmp_path / "logs"),
                                      "--fresh-processes", *argv])  # fmt: skip
    code = harness.main(args)
    return code, json.loads((tmp_path / "out" / "fake-gpu" / "e2e.json").read_text())


def test_main_writes_the_document(tmp_path, monkeypatch):
    code, doc = run_main(tmp_path, monkeypatch, FakeRunner())
    assert code == 0
    assert doc["schema"] == harness.E2E_SCHEMA and doc["complete"] is True and doc["ids_identical"] is True
    assert doc["machine"]["device_slug"] == "fake-gpu" and "provenance" in doc
    assert doc["model"]["name"] == "model" and "path" not in doc["model"]
    assert (
        doc["model"]["architecture"] == "Qwen3_5MoeForCausalLM" and doc["model"]["synthetic"]["spec"]["experts"] == 16
    )
    assert [p["slots"] for p in doc["points"]] == [51, 35]
    for p in doc["points"]:
        for v in ("upstream", "tma"):
            d = p["kernels"][v]
            assert len(d["tokens_per_s"]) == 3 and len(d["ids_sha256"]) == 3 and d["ttft_s_median"] == 0.5
            assert d["misses_per_token_median"] == 9.5 and d["vram_peak_reserved_bytes"] == 10 << 30
        assert p["ratio"]["tma"]["ratio"] == pytest.approx(102.0 / 101.0)
    assert len(doc["runs"]) == 12 and "machine" not in doc["runs"][0]
    assert doc["settings"]["kernels"] == {
        "upstream": {"FREETOKEN_DECODE_GATHER": None},
        "tma": {"FREETOKEN_DECODE_GATHER": "tma"},
    }


def test_main_exits_1_when_ids_differ(tmp_path, monkeypatch):
    code, doc = run_main(tmp_path, monkeypatch, FakeRunner(bad=(0, 1, "upstream")), ["--repeats", "2"])
    assert code == 1
    assert doc["ids_identical"] is False and doc["complete"] is False and doc["exit_code"] == 1
    assert doc["points"][1]["ids_identical"] is False and doc["points"][0]["ids_identical"] is True


def test_main_refuses_bad_settings(tmp_path, monkeypatch, caplog):
    caplog.set_level("INFO")
    model = make_model_dir(tmp_path)
    for argv, msg in (
        (["--slots", "8"], "at least num_experts=16"),
        (["--skip", "-1"], "--skip -1"),
        (["--kv-tokens", "1024"], "--kv-tokens 1024"),
    ):
        args = build_parser().parse_args(["run", "--model", str(model), *argv])
        caplog.clear()
        assert harness.main(args) == harness.EXIT_FAILED
        assert msg in caplog.text
    with pytest.raises(SystemExit):
        build_parser().parse_args(["run", "--model", str(model), "--miss-rate", "1.5"])


def test_worker_pure_parts():
    assert ids_sha256([1, 2, 3]) == ids_sha256([1, 2, 3]) != ids_sha256([1, 2, 4])
    assert expected_kernel(None) == "fast_index_copy_multi" and expected_kernel("tma") == "decode_gather"
    cache = types.SimpleNamespace(_decode_miss_copy=upstream_launcher(8), _copy_fused_ok=True, _copy_blocks_per_bank=8)
    assert copy_kernel(cache) == "fast_index_copy_multi" and copy_grid(cache) == {"blocks_per_bank": 8}
    cache._copy_fused_ok = False
    assert copy_kernel(cache) == "fast_index_copy (per bank)"
    cache._decode_miss_copy = ring_launcher(16, 4, 8192)
    assert copy_kernel(cache) == "decode_gather"
    args = argparse.Namespace(slots=600, kv_tokens=8192)
    pytest.importorskip("freetoken.mm.config", reason="needs the patched freetoken wheel")
    from bench.e2e.worker import engine_kwargs

    kw = engine_kwargs(args, num_experts=256)
    assert kw["moe_strategy"] == "offload" and kw["moe_cache_size"] == 600 and kw["moe_prefill_overlap"] is True
    assert kw["max_running_req"] == kw["cuda_graph_max_bs"] == 1 and kw["moe_collect_stats"] is True
    assert engine_kwargs(argparse.Namespace(slots=300, kv_tokens=8192), num_experts=256)["moe_prefill_overlap"] is False


# --------------------------------------------------------------------------- the auto kernel (--auto)


def test_schedule_with_auto_runs_every_variant_and_reverses_on_odd_points():
    names = ("upstream", "tma", "auto")
    plan = harness.schedule(points=2, repeats=2, names=names)
    assert len(plan) == 12
    assert [v for _, _, v in plan[:3]] == ["upstream", "tma", "auto"]
    assert [v for _, _, v in plan[3:6]] == ["auto", "tma", "upstream"]  # repeat 0, point 1
    for r in range(2):
        for p in range(2):
            assert sorted(v for rr, pp, v in plan if (rr, pp) == (r, p)) == ["auto", "tma", "upstream"]


def test_auto_arm_is_compared_with_upstream_beside_tma():
    runs = []
    for r, (u, t, a) in enumerate(((100.0, 101.0, 100.2), (102.0, 103.5, 101.9), (99.0, 100.0, 99.1))):
        kernels = (("upstream", u), ("tma", t), ("auto", a))
        runs += [{"repeat": r, "point": 0, "kernel": v, **fake_result(x)} for v, x in kernels]
    s = harness.summarize_point({"slots": 948}, 0, runs, ("upstream", "tma", "auto"))
    assert s["ratio"]["tma"].ratio == pytest.approx(1.01)
    auto = s["ratio"]["auto"]
    assert auto.ratio == pytest.approx(100.2 / 100.0)
    assert (auto.paired_min, auto.ratio_paired, auto.paired_max) == pytest.approx([101.9 / 102.0, 99.1 / 99.0, 1.002])
    assert auto.verdict == "tie" and s["ids_identical"] is True
    runs[-1]["ids_sha256"] = "c" * 64  # auto generated other ids in repeat 2
    assert harness.summarize_point({"slots": 948}, 0, runs, ("upstream", "tma", "auto"))["ids_identical"] is False


def test_ids_mismatch_counts_any_two_variants_so_far():
    runs = [
        {"repeat": 0, "point": 0, "kernel": "upstream", "ids_sha256": "x"},
        {"repeat": 0, "point": 0, "kernel": "auto", "ids_sha256": "z"},  # tma has not run yet
    ]
    assert harness.ids_mismatches(runs) == [{"repeat": 0, "point": 0, "upstream": "x", "auto": "z"}]


def test_main_with_auto_runs_three_variants(tmp_path, monkeypatch):
    runner = FakeRunner()
    code, doc = run_main(tmp_path, monkeypatch, runner, ["--auto", "--repeats", "2"])
    assert code == 0 and len(doc["runs"]) == 2 * 2 * 3
    assert doc["settings"]["kernels"]["auto"] == {"FREETOKEN_DECODE_GATHER": "auto"}
    assert all(set(p["ratio"]) == {"tma", "auto"} for p in doc["points"])
    (tmp_path / "again").mkdir()
    code, doc = run_main(tmp_path / "again", monkeypatch, FakeRunner(bad=(1, 0, "auto")), ["--auto", "--repeats", "2"])
    assert code == 1 and doc["points"][0]["ids_identical"] is False


def test_worker_reports_what_runs_from_the_launcher_not_a_label():
    """copy_kernel / copy_grid read the cache's decode miss launcher (``_decode_miss_copy``, auto's choice
    included): its kernel and ring or grid are its fields; a label is never parsed."""
    assert expected_kernel("auto") is None and expected_kernel(" AUTO ") is None
    pick = types.SimpleNamespace(auto=types.SimpleNamespace(label="tma 1x1x1"))  # auto's label: never read
    cache = types.SimpleNamespace(_copy_fused_ok=True, _copy_blocks_per_bank=8, _decode_miss_copy=upstream_launcher(32),
                                  _decode_gather_switch=pick)  # fmt: skip
    assert copy_kernel(cache) == "fast_index_copy_multi" and copy_grid(cache) == {"blocks_per_bank": 32}
    cache._decode_miss_copy = ring_launcher(8, 2, 16384)
    assert copy_kernel(cache) == "decode_gather" and copy_grid(cache) == {"ctas": 8, "stages": 2, "chunk_bytes": 16384}
    cache._decode_miss_copy = None  # no launcher: the cache's own fast_index_copy_multi at its grid
    assert copy_grid(cache) == {"blocks_per_bank": 8}
    cache._decode_miss_copy = print  # a launcher of neither kernel
    with pytest.raises(ValueError, match="neither a decode_gather ring nor a fast_index_copy_multi grid"):
        copy_grid(cache)
