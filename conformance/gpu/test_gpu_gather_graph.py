"""decode_gather inside CUDA graphs: one capture, many replays with different device-side miss lists.

The miss lists and counts live in static device buffers that are rewritten (device-side copies on the
capturing stream's successor, the current stream) before every replay, exactly as the offload cache's
ensure kernel rewrites them inside the decode graph. Every replay is poisoned first and compared
byte for byte against the torch-indexing reference.
"""

from __future__ import annotations

import random

import pytest

from suite.geometry import MODEL, NVFP4_ROW_BYTES, OPT_IN_RINGS
from gpukit.launch import call_tma
from gpukit.memory import HostBanks, MissList, SlotCache, check_slot_cache, poison_value, random_misses

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

SLOTS, CAPACITY, EXPERTS = 640, 600, MODEL["experts"]
# 24 replays of one capture: both ends, powers of two and their neighbours, repeats of 0 and 600
REPLAY_COUNTS = [0, 1, 600, 2, 599, 3, 8, 63, 64, 65, 127, 128, 129, 255, 256, 257, 300, 511, 512, 513, 37, 0, 600, 444]


@pytest.fixture(scope="module")
def nvfp4(real_gpu):
    banks = HostBanks(1, EXPERTS, NVFP4_ROW_BYTES, real_gpu.device, seed=21)
    cache = SlotCache(SLOTS, NVFP4_ROW_BYTES, real_gpu.device)
    yield banks, cache
    banks.close()


# the module default with both index widths, and every opt-in ring (past 48 KiB of shared memory)
REPLAYED = [("default", "int32"), ("default", "int64"), *((str(r), "int32") for r in OPT_IN_RINGS)]


@pytest.mark.parametrize("ring_tag, index_dtype", REPLAYED)
def test_one_capture_many_replays(real_gpu, nvfp4, tally, ring_tag, index_dtype):
    gpu, torch = real_gpu, real_gpu.torch
    banks, cache = nvfp4
    ring = None if ring_tag == "default" else gpu.rings[ring_tag]
    rng = random.Random(f"graph-replay-{index_dtype}" + ("" if ring is None else f"-{ring_tag}"))
    misses = MissList(CAPACITY, index_dtype, gpu.device)
    dst, src = random_misses(rng, CAPACITY, 1, SLOTS, EXPERTS)
    misses.set(dst, src, 1)
    # eager first: checks the layout (and opts an opt-in ring in to its shared memory) outside capture
    call_tma(gpu.decode_gather, cache, banks.src_ptrs[0], misses.dst, misses.src, misses.num, ring)
    gpu.sync()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        call_tma(gpu.decode_gather, cache, banks.src_ptrs[0], misses.dst, misses.src, misses.num, ring)
    for i, n in enumerate(REPLAY_COUNTS):
        if i % 8 == 0:
            banks.fill(seed=rng.randrange(1 << 31))  # the graph reads the sources at replay time
        dst, src = random_misses(rng, CAPACITY, n, SLOTS, EXPERTS)
        misses.set(dst, src, n)
        poison = poison_value(i, rng)
        cache.poison(poison)
        graph.replay()
        err = check_slot_cache(cache, poison, [(dst[:n], src[:n], banks.dev[0])])
        assert err is None, f"ring {ring_tag} replay {i} n={n} {index_dtype}: {err}"
        tally(1, n * banks.bytes_per_expert)
    del graph


@pytest.mark.parametrize("layers", [16, 40])
def test_multi_layer_graph_with_per_layer_sources(real_gpu, tally, layers):
    """One captured graph of ``layers`` launches, each with its own source banks (16 experts per
    layer, all distinct bytes), its own miss buffers and count, writing disjoint slot ranges."""
    gpu, torch = real_gpu, real_gpu.torch
    per_layer = 16
    rng = random.Random(f"graph-layers-{layers}")
    banks = HostBanks(layers, per_layer, NVFP4_ROW_BYTES, gpu.device, seed=layers)
    try:
        cache = SlotCache(per_layer * layers, NVFP4_ROW_BYTES, gpu.device)
        lists = [MissList(per_layer, "int32", gpu.device) for _ in range(layers)]

        def draw(counts):
            plan = []
            for layer, (ml, n) in enumerate(zip(lists, counts)):
                local, rows = random_misses(rng, per_layer, n, per_layer, per_layer)
                slots = [per_layer * layer + s for s in local]
                ml.set(slots, rows, n)
                plan.append((slots[:n], rows[:n], banks.dev[layer]))
            return plan

        draw([1] * layers)
        for layer, ml in enumerate(lists):  # eager, so every layer's descriptor is checked before capture
            call_tma(gpu.decode_gather, cache, banks.src_ptrs[layer], ml.dst, ml.src, ml.num)
        gpu.sync()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for layer, ml in enumerate(lists):
                call_tma(gpu.decode_gather, cache, banks.src_ptrs[layer], ml.dst, ml.src, ml.num)
        schedule = [[0] * layers, [per_layer] * layers] + [
            [
                rng.choice([0, 1, 1, 2, 3, 8, per_layer]) if r % 2 else rng.randrange(per_layer + 1)
                for _ in range(layers)
            ]
            for r in range(20)
        ]
        for i, counts in enumerate(schedule):
            if i % 11 == 5:
                banks.fill(seed=rng.randrange(1 << 31))
            plan = draw(counts)
            poison = poison_value(i, rng)
            cache.poison(poison)
            graph.replay()
            err = check_slot_cache(cache, poison, plan)
            assert err is None, f"{layers}-layer graph, replay {i}, counts {counts}: {err}"
            tally(layers, sum(counts) * banks.bytes_per_expert)
        del graph
    finally:
        banks.close()
