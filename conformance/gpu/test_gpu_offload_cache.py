"""The real OffloadMoeCache with ``FREETOKEN_DECODE_GATHER`` unset vs ``tma``: same trace, same bytes.

Two caches (nvfp4 schema, 8 layers, 256 experts, 320 slots) share synthetic pinned banks (8 distinct
layers of random bytes). A Zipf-skewed top-8 routing trace drives both through ``ensure_experts`` +
``copy_missing``, eagerly and inside one captured decode graph per cache. After every step: the
rewritten slot ids, ``slot_for_id``, ``id_of_slot`` and every byte of every bank's slot cache are
identical between the two caches, and every resident slot equals its expert's source row (torch
indexing of the device copies of the banks; empty slots are still zero). The ``tma`` cache must
actually launch decode_gather on the miss path (a launch counter wraps both kernels' JIT modules)
and the unset cache must launch upstream's kernel.
"""

from __future__ import annotations

import functools
import random

import pytest

from suite.geometry import MODEL, NVFP4_ROW_BYTES, nvfp4_banks
from gpukit.launch import LaunchCounter
from gpukit.memory import HostBanks, cache_reference_diff, cache_rows
from suite.rounds import run_rounds
from gpukit.routing import zipf_routing_trace

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

ENV = "FREETOKEN_DECODE_GATHER"
LAYERS, EXPERTS, TOP_K = 8, MODEL["experts"], MODEL["top_k"]
CACHE_SLOTS = 320
ZIPF = 1.0
GEOMS = nvfp4_banks()


@pytest.fixture(scope="module")
def banks(real_gpu):
    b = HostBanks(LAYERS, EXPERTS, NVFP4_ROW_BYTES, real_gpu.device, seed=31)
    yield b
    b.close()


def _sources(banks):
    per_layer = [banks.typed(layer, GEOMS) for layer in range(LAYERS)]
    return {g.name: [per_layer[layer][g.name] for layer in range(LAYERS)] for g in GEOMS}


def _make_cache(gpu, banks, monkeypatch, value):
    from freetoken.moe.offload_cache import OffloadMoeCache

    if value is None:
        monkeypatch.delenv(ENV, raising=False)
    else:
        monkeypatch.setenv(ENV, value)
    cache = OffloadMoeCache(
        num_layers=LAYERS, num_experts=EXPERTS, cache_size=CACHE_SLOTS, device=gpu.device, quant_format="nvfp4"
    )
    cache.set_bank_sources(_sources(banks))
    monkeypatch.delenv(ENV, raising=False)
    assert cache._copy_fused_ok, "the nvfp4 banks must take the fused multi-bank copy plan"
    assert not cache._raw_banks
    return cache


_rows = cache_rows


def _state_diff(a, b) -> str | None:
    import torch

    if not torch.equal(a.slot_for_id, b.slot_for_id):
        return "slot_for_id differs"
    if not torch.equal(a.id_of_slot, b.id_of_slot):
        return "id_of_slot differs"
    for g in GEOMS:
        if not torch.equal(_rows(a, g.name), _rows(b, g.name)):
            bad = (_rows(a, g.name) != _rows(b, g.name)).any(dim=1).nonzero().flatten()[:8].tolist()
            return f"bank {g.name}: slot rows {bad} differ between the caches"
    return None


def _reference_diff(cache, banks) -> str | None:
    return cache_reference_diff(cache, lambda layer: banks.dev[layer], GEOMS, EXPERTS)


def _trace(gpu, steps, batch, seed):
    return zipf_routing_trace(steps, LAYERS, EXPERTS, TOP_K, ZIPF, batch=batch, seed=seed).to(gpu.device)


def test_env_switch_values(real_gpu, monkeypatch):
    from freetoken.moe.offload_cache import OffloadMoeCache

    monkeypatch.setenv(ENV, "bogus")
    with pytest.raises(ValueError) as info:
        OffloadMoeCache(num_layers=1, num_experts=8, cache_size=8, device=real_gpu.device, quant_format="nvfp4")
    assert ENV in str(info.value) or "bogus" in str(info.value), f"unclear error: {info.value}"


def test_eager_steps_identical_and_tma_uses_decode_gather(sm90, banks, monkeypatch, tally):
    gpu, torch = sm90, sm90.torch
    with LaunchCounter(gpu.decode_gather, gpu.fast_index_copy) as counter:
        base = _make_cache(gpu, banks, monkeypatch, None)
        tma = _make_cache(gpu, banks, monkeypatch, "tma")
        assert hasattr(tma, "_decode_miss_copy"), (
            "OffloadMoeCache has no _decode_miss_copy: the FREETOKEN_DECODE_GATHER wiring is missing"
        )
        upstream = gpu.fast_index_copy.fast_index_copy_multi_jit  # the decode miss launcher's function, unless tma
        assert tma._decode_miss_copy.func is not upstream, "the tma cache did not select decode_gather"
        assert base._decode_miss_copy.func is upstream, f"unset cache runs {base._decode_miss_copy!r}"
        rng = random.Random("cache-eager")
        steps = 24
        trace = _trace(gpu, steps, 4, seed=5)
        launches = {"base": [0, 0], "tma": [0, 0]}  # [decode_gather, upstream]
        misses_total = 0
        for t in range(steps):
            batch = rng.randint(1, 4)
            out = {}
            for name, cache in (("base", base), ("tma", tma)):
                counter.reset()
                out[name] = []
                for layer in range(LAYERS):
                    ids = trace[t, layer, :batch].clone()
                    cache.ensure_experts(layer, ids)
                    if name == "tma":
                        misses_total += int(cache.num_indices.item())
                    cache.copy_missing()
                    out[name].append(ids)
                launches[name][0] += counter.decode_gather
                launches[name][1] += counter.upstream
            for layer in range(LAYERS):
                assert torch.equal(out["base"][layer], out["tma"][layer]), f"step {t} layer {layer}: slot ids differ"
            err = _state_diff(base, tma) or _reference_diff(tma, banks) or _reference_diff(base, banks)
            assert err is None, f"step {t}: {err}"
        tally(steps * LAYERS, misses_total * banks.bytes_per_expert)
        calls = steps * LAYERS
        tally.note(
            "eager_launches",
            {
                "calls": calls,
                "tma": launches["tma"],
                "upstream": launches["base"],
                "decode_gather_jit_calls": counter.decode_gather_jit_calls,
                "misses": misses_total,
            },
        )
        assert launches["tma"] == [calls, 0], (
            f"tma cache launched [decode_gather, upstream] = {launches['tma']} for {calls} copy_missing calls"
        )
        assert launches["base"] == [0, calls], (
            f"upstream cache launched [decode_gather, upstream] = {launches['base']} for {calls} copy_missing calls"
        )
        assert misses_total > 0


def test_captured_decode_graph_identical(sm90, banks, monkeypatch, tally):
    gpu, torch = sm90, sm90.torch
    base = _make_cache(gpu, banks, monkeypatch, None)
    tma = _make_cache(gpu, banks, monkeypatch, "tma")
    batch, warm, replays = 2, 3, 24
    trace = _trace(gpu, warm + replays, batch, seed=9)
    caches = {"base": base, "tma": tma}
    static = {name: torch.empty((LAYERS, batch, TOP_K), dtype=torch.int32, device=gpu.device) for name in caches}
    for cache in caches.values():
        cache.collect_stats = True  # the ensure kernel counts misses on the device, inside the graph too
    for t in range(warm):  # eager warm-up: compiles the ensure kernel, checks the descriptors
        for name, cache in caches.items():
            static[name].copy_(trace[t])
            for layer in range(LAYERS):
                cache.ensure_experts(layer, static[name][layer])
                cache.copy_missing()
    gpu.sync()
    for cache in caches.values():
        cache.reset_stats()
    graphs = {}
    for name, cache in caches.items():
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for layer in range(LAYERS):
                cache.ensure_experts(layer, static[name][layer])
                cache.copy_missing()
        graphs[name] = g
    # capture ran the ensure kernel's bookkeeping only on the capture stream's graph, not eagerly:
    # the caches are still in their post-warm-up state, identical
    assert _state_diff(base, tma) is None

    def replay(name: str, r: int) -> None:
        static[name].copy_(trace[warm + r])
        graphs[name].replay()

    def same_state(r: int) -> None:
        assert torch.equal(static["base"], static["tma"]), f"replay {r}: slot ids differ"
        err = _state_diff(base, tma) or _reference_diff(tma, banks)
        assert err is None, f"replay {r}: {err}"

    # one trace step per round, the two caches in alternating order
    run_rounds({name: functools.partial(replay, name) for name in caches}, replays, after_round=same_state)
    stats = {name: cache.decode_miss_stats() for name, cache in caches.items()}
    assert stats["base"] == stats["tma"], stats
    misses = round(stats["tma"]["missing_per_layer"] * stats["tma"]["layer_calls"])
    assert stats["tma"]["layer_calls"] == replays * LAYERS, stats
    tally(replays * LAYERS, misses * banks.bytes_per_expert)
    tally.note("graph_miss_stats", stats["tma"])
    graphs.clear()
