"""``FREETOKEN_DECODE_GATHER=auto`` through the real decode step: the probe leaves nothing behind.

Two real OffloadMoeCaches (nvfp4, 16 layers, 256 experts) on the same pinned banks, one unset and
one with ``auto`` (its start-up probe runs while its banks are attached), go through the same
Zipf top-8 trace in one captured decode graph each (gpukit.decode_step). After the warm-up and
after every replay the two hold the same slot map, the same routed slots and the same bytes in
every slot of every bank, and every resident slot equals its expert's source row: whatever the
probe wrote and whichever kernel it chose, the cache behaves as upstream's. What it chose and its
figures go to the conformance summary.
"""

from __future__ import annotations

import pytest

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

ENV = "FREETOKEN_DECODE_GATHER"


def test_auto_cache_matches_unset_through_the_captured_decode_step(real_gpu, tally):
    from freetoken.kernel.fast_index_copy import fast_index_copy_multi_jit
    from freetoken.moe.decode_gather_auto import describe
    from gpukit.decode_step import DecodeStep, StepConfig, StepVariant

    config = StepConfig(layers=16, slots_per_layer=24, zipf_exponent=1.0, source_layers=8, warm=8, steps=24)
    step = DecodeStep([StepVariant("unset"), StepVariant("auto", {ENV: "auto"})], config, device=real_gpu.device)
    try:
        auto, unset = step.caches["auto"], step.caches["unset"]
        choice = auto.decode_gather_auto
        assert choice is not None, f"{ENV}=auto built a cache without decode_gather_auto"
        assert unset.decode_gather_auto is None and unset._decode_miss_copy.func is fast_index_copy_multi_jit
        assert auto._decode_miss_copy is choice.launch  # the kernel its label names
        tally.note("auto_choice", describe(choice))
        assert step.state_diff("unset", "auto") is None, "after the warm-up"
        for k in range(config.steps):
            for name in ("unset", "auto"):
                step.replay(name, k)
            real_gpu.torch.cuda.synchronize(real_gpu.device)
            err = step.state_diff("unset", "auto") or step.reference_diff("auto")
            assert err is None, f"replay {k}: {err}"
        stats = step.miss_stats()
        assert stats["unset"] == stats["auto"] and stats["auto"]["missing_per_layer"] > 0, stats
        tally(config.steps * config.layers)
    finally:
        step.close()
