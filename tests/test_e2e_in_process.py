"""CPU checks of the end-to-end A/B harness run in one engine process (the default), with a fake engine: the
kernels alternate every round and the graphs are captured again before each run, the stop rules, the refusals
and the paired ratio against the A/A spread."""

from __future__ import annotations

import json
import types

import pytest

from helpers import fake_result, make_model_dir, ring_launcher, upstream_launcher
from bench.e2e import harness, inprocess
from bench.e2e.__main__ import build_parser
from suite.kernels import launched



ARMS = ("upstream", "tma", "upstream_aa")


class FakeAttn:
    def __init__(self, events):
        self.events, self.capture = events, None

    def reset_capture(self):
        self.events.append("reset_capture")
        self.capture = None


class FakeCache:
    """An offload cache's surface: its launchers, counters and reset (a capture resets it)."""

    num_layers, num_experts, prefill_overlap, _copy_fused_ok, _copy_blocks_per_bank = 4, 16, True, True, 8

    def __init__(self, misses=2.0):
        self._whole_layer_copy = self._decode_miss_copy = upstream_launcher(8)
        self.cold, self.misses = True, misses

    def reset(self):
        self.cold = True

    def decode_miss_stats(self):
        return {"missing_per_layer": self.misses, "layer_calls": 400, "miss_rate": self.misses / 8,
                "active_per_layer": 8.0}  # fmt: skip


class FakeGraphRunner:
    """GraphRunner's surface: a capture (as the engine's constructor runs it) records the launcher the cache holds
    then, which its batch-1 graph replays; init_capture_graph's assert on the attention backend's capture."""

    def __init__(self, engine, graph_bs=(1,)):
        self.engine, self.graph_bs_list, self.captured_with = engine, list(graph_bs), []
        self._capture_graphs(8192, 1000, model="model")

    def _capture_graphs(self, max_seq_len, vocab_size, model):
        attn, cache = self.engine.attn_backend, self.engine.moe_offload_cache
        assert attn.capture is None, "Capture already initialized."
        attn.capture = object()
        self.graph_map = {bs: cache._decode_miss_copy for bs in self.graph_bs_list}
        cache.reset()
        self.captured_with.append((max_seq_len, vocab_size, model))
        self.engine.events.append("capture")

    def destroy_cuda_graphs(self):
        self.engine.events.append("destroy")
        self.graph_map = {}


class RecordingRunner(FakeGraphRunner):
    """What freetoken's GraphRunner is once the in-process runner has loaded the engine."""


def fake_engine(graph_bs=(1,), record=True):
    inprocess.record_capture_args(RecordingRunner)
    inprocess.record_capture_args(RecordingRunner)  # twice: wrapped once
    events = []
    engine = types.SimpleNamespace(events=events, attn_backend=FakeAttn(events), moe_offload_cache=FakeCache())
    engine.graph_runner = (RecordingRunner if record else FakeGraphRunner)(engine, graph_bs)
    return types.SimpleNamespace(engine=engine, tokenizer=types.SimpleNamespace(encode=lambda text: [0] * 90))


FAKE_TORCH = types.SimpleNamespace(cuda=types.SimpleNamespace(mem_get_info=lambda: (1 << 30, 80 << 30),
                                                              max_memory_reserved=lambda: 3 << 30,
                                                              max_memory_allocated=lambda: 3 << 30))  # fmt: skip


class FakeGeneration:
    """The engine's generation: replays the batch-1 graph (a step of 1 ms, tma's 2 % shorter), the rounds drifting
    1 % each; ``odd``: {(round, kernel): (ids, misses)} of runs that differ."""

    def __init__(self, odd=None):
        self.calls, self.seen, self.odd = 0, [], odd or {}

    def __call__(self, llm, args, torch):
        engine = llm.engine
        cache, launch = engine.moe_offload_cache, engine.graph_runner.graph_map[1]
        assert cache.cold, "a run started from a warm cache"
        cache.cold = False
        kernel = launched(launch, 8).kernel
        rnd = self.calls // 3
        self.seen.append((rnd, str(kernel), list(engine.events)))
        engine.events.clear()
        ids, misses = self.odd.get((rnd, len(self.seen) - 1), ([7] * (args.skip + args.tokens + 1), 2.0))
        cache.misses = misses
        self.calls += 1
        step = 1e-3 * (1 + 0.01 * rnd) / (1.02 if kernel == "tma" else 1.0)
        return ids, [10.0 + i * step for i in range(args.skip + args.tokens + 1)], 9.9


def run_in_process(tmp_path, monkeypatch, generate, argv=(), llm=None, load=None):
    model = make_model_dir(tmp_path)
    llm = llm or fake_engine()
    arms = {"upstream": llm.engine.moe_offload_cache._whole_layer_copy, "tma": ring_launcher(16, 4, 8192)}
    arms["upstream_aa"] = arms["upstream"]
    loads = []

    def fake_load(args):
        loads.append(args.slots)
        return llm, llm.engine.moe_offload_cache, arms, FAKE_TORCH

    runner = inprocess.InProcess
    monkeypatch.setattr(harness, "in_process_runner", lambda args: runner(
        args, load=load or fake_load, generate=generate, facts=lambda: {"device_slug": "fake-gpu"}))
    monkeypatch.setenv("FT_RESULTS_DIR", str(tmp_path / "out"))
    args = build_parser().parse_args(["run", "--model", str(model), "--tokens", "64", "--skip", "8", *argv])
    code = harness.main(args)
    doc = json.loads((tmp_path / "out" / "fake-gpu" / "e2e.json").read_text()) if loads else None
    return code, doc, loads, llm


def test_in_process_alternates_the_kernels_and_recaptures_before_every_run(tmp_path, monkeypatch):
    gen = FakeGeneration()
    code, doc, loads, llm = run_in_process(tmp_path, monkeypatch, gen)
    assert code == 0 and loads == [51]  # one engine, at the default point (miss rate 0.1)
    order = [tuple(r["kernel"] for r in doc["runs"][i : i + 3]) for i in range(0, len(doc["runs"]), 3)]
    assert len(order) == 10 == doc["settings"]["repeats"]  # ten rounds by default
    assert order[0] == ARMS and order[1] == ARMS[::-1] and order == [order[0], order[1]] * 5
    # before every run: the launcher set, the attention capture dropped, the graphs destroyed and captured again
    assert [e for _, _, e in gen.seen] == [["capture", "reset_capture", "destroy", "capture"]] + [
        ["reset_capture", "destroy", "capture"]] * 29  # the first: the engine's own capture at load
    assert [(rnd, k) for rnd, k, _ in gen.seen] == [(r["repeat"], "tma" if r["kernel"] == "tma" else "upstream")
                                                   for r in doc["runs"]]  # fmt: skip
    assert set(llm.engine.graph_runner.captured_with) == {(8192, 1000, "model")}  # the arguments of the first
    assert {r["copy_kernel"] for r in doc["runs"] if r["kernel"] == "tma"} == {"decode_gather"}
    assert {r["copy_kernel"] for r in doc["runs"] if r["kernel"] != "tma"} == {"fast_index_copy_multi"}
    assert doc["settings"]["rule"] == "aa" and "cache_type naive" in doc["settings"]["process"]
    assert "--cache-type naive" in doc["settings"]["serve_equivalent"][0]
    point = doc["points"][0]
    c = point["ratio"]["tma"]
    assert set(point["ratio"]) == {"tma"} and set(point["kernels"]) == set(ARMS)
    assert c["rule"] == "aa" and c["ratio"] == pytest.approx(1.02) and c["aa_spread"] == pytest.approx(0, abs=1e-9)
    assert c["paired_min"] == pytest.approx(1.02) and c["verdict"] == "faster"  # the 1 % drift a round cancels out
    assert point["ids_identical"] is True and point["miss_counts_identical"] is True and doc["ids_identical"] is True
    assert doc["machine"] == {"device_slug": "fake-gpu"}  # the first run's, as the first fresh process's
    assert "load_s" in doc["runs"][0] and "load_s" not in doc["runs"][1]


@pytest.mark.parametrize("odd, at", [
    ({(3, 10): ([8] * 73, 2.0)}, "round 4"),  # tma of round 4 generates other ids
    ({(2, 6): ([7] * 73, 2.5)}, "round 3"),  # one run's misses differ, its ids do not
    ({(1, k): ([9] * 73, 2.0) for k in (3, 4, 5)}, "round 2"),  # a whole round differs from round 1, alike within
])  # fmt: skip
def test_in_process_stops_with_exit_1_when_ids_or_misses_differ_from_any_run(tmp_path, monkeypatch, odd, at):
    code, doc, _, _ = run_in_process(tmp_path, monkeypatch, FakeGeneration(odd))
    assert code == harness.EXIT_IDS_DIFFER == 1 and doc["complete"] is False and doc["exit_code"] == 1
    assert f"ids or miss counts differ between upstream/tma/upstream_aa ({at}, slots 51)" in doc["errors"][0]
    assert len(doc["runs"]) == min(k for _, k in odd) + 1  # stopped at once


def test_in_process_tma_that_cannot_run_names_the_switch(tmp_path, monkeypatch, caplog):
    cache = FakeCache()
    with pytest.raises(RuntimeError, match=r"FREETOKEN_DECODE_GATHER=tma \(FREETOKEN_DECODE_GATHER_RING=16x4x8192\) "
                                           r"cannot run on this cache: needs sm_90, this GPU is sm_80"):  # fmt: skip
        inprocess.launchers(cache, lambda c, ring: (None, "needs sm_90, this GPU is sm_80"), (16, 4, 8192))
    arms = inprocess.launchers(cache, lambda c, ring: (ring_launcher(*ring), None), (8, 2, 16384))
    assert arms["upstream"] is arms["upstream_aa"] is cache._whole_layer_copy and arms["tma"].keywords["ctas"] == 8

    def load(args):
        inprocess.launchers(cache, lambda c, ring: (None, "the fused copy plan is unavailable"), (16, 4, 8192))

    caplog.set_level("INFO")
    code, _, _, _ = run_in_process(tmp_path, monkeypatch, FakeGeneration(), load=load)
    assert code == harness.EXIT_FAILED and "FREETOKEN_DECODE_GATHER=tma" in caplog.text
    assert "the fused copy plan is unavailable" in caplog.text


def test_recapture_refuses_an_engine_without_a_batch_1_graph_or_its_capture_arguments():
    with pytest.raises(RuntimeError, match=r"no batch-1 CUDA graph \(graph batch sizes \[2, 4\]\)"):
        inprocess.recapture(fake_engine(graph_bs=(2, 4)).engine)
    with pytest.raises(RuntimeError, match=r"kept no capture arguments: record_capture_args\(GraphRunner\) must run"):
        inprocess.recapture(fake_engine(record=False).engine)
    engine = fake_engine().engine
    inprocess.recapture(engine)
    assert engine.events == ["capture", "reset_capture", "destroy", "capture"]


@pytest.mark.parametrize("argv, msg", [
    (["--slots", "40", "48"], "--slots 40 48: the in-process A/B (the default) measures one slot point per run"),
    (["--miss-rate", "0.1", "0.3"], "--miss-rate 0.1 0.3: the in-process A/B"),
    (["--auto"], "--auto runs with --fresh-processes only"),
])  # fmt: skip
def test_in_process_refuses_what_one_engine_cannot_run(tmp_path, monkeypatch, caplog, argv, msg):
    caplog.set_level("INFO")
    code, _, loads, _ = run_in_process(tmp_path, monkeypatch, FakeGeneration(), argv)
    assert code == harness.EXIT_FAILED and msg in caplog.text and not loads


def test_paired_rounds_give_the_ratio_of_median_times_against_the_aa_spread():
    tps = {"upstream": (100.0, 104.0, 98.0), "upstream_aa": (100.2, 103.0, 98.0), "tma": (102.0, 105.0, 99.5)}
    runs = [{"repeat": r, "point": 0, "kernel": k, **fake_result(v[r])} for r in range(3) for k, v in tps.items()]
    s = harness.summarize_point({"slots": 948}, 0, runs, ARMS)
    c = s["ratio"]["tma"]
    assert set(s["ratio"]) == {"tma"} and c.rule == "aa"
    assert c.ratio == pytest.approx(102.0 / 100.0)  # upstream's median time / tma's
    assert c.aa_spread == pytest.approx(1 - 103.0 / 104.0)  # the largest per-round |base / A/A - 1| of times
    assert (c.paired_min, c.ratio_paired, c.paired_max) == pytest.approx([105.0 / 104, 99.5 / 98, 102.0 / 100])
    assert c.verdict == "faster" and s["ids_identical"] is True  # 2 % against a spread of 0.97 %
    runs[4]["tokens_per_s"] = 104.0 * 1.025  # round 2's A/A 2.5 % off its upstream: 2 % no longer stands out
    assert harness.summarize_point({"slots": 948}, 0, runs, ARMS)["ratio"]["tma"].verdict == "tie"
    runs[-1]["ids_sha256"] = "c" * 64
    assert harness.summarize_point({"slots": 948}, 0, runs, ARMS)["ids_identical"] is False
