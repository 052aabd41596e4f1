"""``FREETOKEN_DECODE_GATHER=auto`` through the real decode step: it runs the profile's pick, byte-exact.

A profile as ``ft bench bw`` writes it, whose ``decode_gather`` entry for the step's bank rows on this GPU picks the
default ring. Two real OffloadMoeCaches (nvfp4, 16 layers, 256 experts) on the same pinned banks, one unset and one
with ``auto`` reading that profile, go through the same Zipf top-8 trace in one captured decode graph each
(gpukit.decode_step). ``auto``'s cache runs the ring, and after the warm-up and after every replay the two hold the
same slot map, the same routed slots and the same bytes in every slot of every bank, and every resident slot equals
its expert's source row. What auto logged goes to the conformance summary.
"""

from __future__ import annotations

import json

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

ENV = "FREETOKEN_DECODE_GATHER"


def test_auto_runs_the_profiles_pick_through_the_captured_decode_step(real_gpu, tally, tmp_path, monkeypatch):
    from freetoken.gpu_select import gpu_identity
    from freetoken.kernel import decode_gather
    from freetoken.kernel.fast_index_copy import default_blocks_per_bank, fast_index_copy_multi_jit
    from freetoken.moe import decode_gather_profile
    from freetoken.version import __version__
    from gpukit.decode_step import DecodeStep, StepConfig, StepKernel
    from suite.geometry import NVFP4_ROW_BYTES

    ring, dev = decode_gather.default_ring(), real_gpu.device
    pick = "tma " + "x".join(map(str, ring))  # the reader states the pick's ratio: the entry must carry it
    entry = {"pick": pick, "ring": list(ring), "ratio": {pick: 1.05}, "aa_spread": 0.001,
             "blocks_per_bank": default_blocks_per_bank(dev), "rounds": 10, "measured_at": "(written by this test)",
             "gpu": {"uuid": gpu_identity(dev.index or 0)["uuid"]}, "freetoken": __version__,
             "kernel_sources": decode_gather_profile.decode_kernels_hash()}  # fmt: skip
    key = decode_gather_profile.decode_gather_key("nvfp4", NVFP4_ROW_BYTES)
    profile = tmp_path / "profile.json"
    profile.write_text(json.dumps({"decode_gather": {"version": decode_gather_profile.DECODE_GATHER_VERSION,
                                                     "entries": {key: entry}}}))  # fmt: skip
    monkeypatch.setenv("FREETOKEN_BENCHBW_PATH", str(profile))
    config = StepConfig(layers=16, slots_per_layer=24, zipf_exponent=1.0, source_layers=8, warm=8, steps=24)
    step = DecodeStep([StepKernel("unset"), StepKernel("auto", {ENV: "auto"})], config, device=dev)
    try:
        auto, unset = step.caches["auto"], step.caches["unset"]
        pick = auto._decode_gather_switch.auto
        assert pick is not None and pick.entry == entry, pick and pick.line
        assert unset._decode_gather_switch.auto is None and unset._decode_miss_copy.func is fast_index_copy_multi_jit
        assert auto._decode_miss_copy.func is decode_gather._decode_gather_jit and auto._decode_miss_copy.keywords == {
            "ctas": ring[0], "stages": ring[1], "chunk_bytes": ring[2]}  # fmt: skip
        tally.note("auto_pick", pick.line)
        assert step.state_diff("unset", "auto") is None, "after the warm-up"
        for k in range(config.steps):
            for name in ("unset", "auto"):
                step.replay(name, k)
            real_gpu.torch.cuda.synchronize(dev)
            err = step.state_diff("unset", "auto") or step.reference_diff("auto")
            assert err is None, f"replay {k}: {err}"
        stats = step.miss_stats()
        assert stats["unset"] == stats["auto"] and stats["auto"]["missing_per_layer"] > 0, stats
        tally(config.steps * config.layers)
    finally:
        step.close()
