"""What the probes share: per-layer gather graphs on one set of buffers, and the captured decode step.

Every timed set is byte-verified (the slot cache is poisoned before it); rounds alternate their
order; upstream is always timed twice, the second time as the A/A control.
"""

from __future__ import annotations

import json
import os
import random
import statistics
from pathlib import Path
from typing import Any, Callable, NamedTuple

import torch

from bench import common as C

LAYERS, SOURCES, EXPERTS, SLOTS = 40, 4, 256, 640
BIG_LAYERS = 4  # n > 32: 40 layers of 600 experts would move 43 GB per replay
median = statistics.median


def layers_for(n: int) -> int:
    return BIG_LAYERS if n > 32 else LAYERS


def paired(times: dict[Any, list[float]], base: Any) -> dict[Any, float]:
    """Median over rounds of base / key (> 1: key faster than base)."""
    return {k: median([a / b for a, b in zip(times[base], v)]) for k, v in times.items()}


class Gather:
    """The benchmark's own buffers (bench/common.py): NVFP4 banks of SOURCES layers x EXPERTS experts
    in pinned host memory with their device reference, a guarded SLOTS-row slot cache, and one device
    miss list that every layer of a graph uses (so the last layer's rows are what the cache must hold)."""

    def __init__(self, dev: torch.device):
        self.banks = C.HostBanks(SOURCES, EXPERTS, C.NVFP4_ROW_BYTES, dev, seed=1)
        self.cache = C.SlotCache(SLOTS, C.NVFP4_ROW_BYTES, dev)
        self.misses = C.MissList(SLOTS, "int32", dev)
        self.n = 0
        self.writes: list = []
        self.sets = 0

    def _call(self, layer: int) -> tuple:
        m = self.misses
        return self.cache, self.banks.src_ptrs[layer % SOURCES], m.dst, m.src, m.num

    def upstream(self, fic) -> Callable[[int], None]:
        return lambda layer: C.call_upstream(fic, *self._call(layer))

    def ring(self, dgm, ring: C.Ring) -> Callable[[int], None]:
        return lambda layer: C.call_ours(dgm, *self._call(layer), ring)

    def module(self, module) -> Callable[[int], None]:
        """A JIT module with decode_gather's launch signature (a kernel variant)."""

        def launch(layer: int) -> None:
            cache, src_ptrs, dst, src, num = self._call(layer)
            module.launch(cache.dst_ptrs, src_ptrs, cache.feat, dst, src, num)

        return launch

    def set_misses(self, n: int) -> None:
        dst, src = C.random_misses(random.Random(f"probe-{n}"), SLOTS, n, SLOTS, EXPERTS)
        self.misses.set(dst, src, n)
        self.n = n
        self.writes = [(dst[:n], src[:n], self.banks.dev[(layers_for(n) - 1) % SOURCES])]

    def graph(self, fn: Callable[[int], None] | None, before: Callable[[], None] | None = None) -> torch.cuda.CUDAGraph:
        """A captured graph of layers_for(n) layers: ``before()`` (if any) then ``fn(layer)`` (if any)."""

        def body() -> None:
            for layer in range(layers_for(self.n)):
                if before is not None:
                    before()
                if fn is not None:
                    fn(layer)

        body()  # eager warm-up (decode_gather checks each descriptor here, outside the capture)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body()
        return g

    def time_rounds(self, graphs: dict[Any, torch.cuda.CUDAGraph], copies: Callable[[Any], bool], rounds: int = 7):
        """µs per layer of every graph, ``rounds`` alternating rounds. Before each timed set the slot cache
        is poisoned and the graph replayed once; for graphs that copy, every byte is then checked."""
        n = self.n
        reps = 20 if n <= 2 else (10 if n <= 32 else 2)
        times: dict[Any, list[float]] = {k: [] for k in graphs}
        for r in range(rounds):
            for key in list(graphs) if r % 2 == 0 else list(graphs)[::-1]:
                poison = C.poison_value(self.sets)
                self.sets += 1
                self.cache.poison(poison)
                graphs[key].replay()
                if copies(key):
                    torch.cuda.synchronize()
                    err = C.check_slot_cache(self.cache, poison, self.writes)
                    assert err is None, f"n={n} {key}: {err}"
                times[key].append(C.time_replays(graphs[key].replay, reps) / reps / layers_for(n) * 1e6)
        return times


class StepSpec(NamedTuple):
    name: str
    env: dict[str, str]  # FREETOKEN_* set while the cache is constructed
    module: Any = None  # a JIT module that replaces decode_gather's for this cache's launches
    copy: bool = True  # False: ensure_experts only


def decode_step(dgm, specs: list[StepSpec], *, rounds: int = 7, per_block: int = 10, warm: int = 40,
                zipf_exponent: float = 1.867) -> dict[str, dict[str, Any]]:
    """The captured decode step (ensure_experts + copy_missing for 40 layers, top-8 Zipf routing at a ~10%
    miss rate) of one real OffloadMoeCache per spec, on the same banks and trace; µs per step per round,
    and the median of specs[0] / spec per round. After every round each copying cache must hold the
    same slot map and bank bytes as specs[0]'s."""
    from freetoken.moe.offload_cache import OffloadMoeCache

    dev = torch.device("cuda")
    banks = C.HostBanks(SOURCES, EXPERTS, C.NVFP4_ROW_BYTES, dev, seed=1)
    geoms = C.nvfp4_banks()
    top_k = C.MODEL["top_k"]
    typed = [banks.typed(layer % SOURCES, geoms) for layer in range(LAYERS)]
    sources = {g.name: [typed[layer][g.name] for layer in range(LAYERS)] for g in geoms}
    names = ("FREETOKEN_DECODE_GATHER", "FREETOKEN_DECODE_GATHER_RING")
    saved = {k: os.environ.get(k) for k in names}
    caches = {}
    try:
        for spec in specs:
            for k in names:
                os.environ.pop(k, None)
            os.environ.update(spec.env)
            c = OffloadMoeCache(
                num_layers=LAYERS, num_experts=EXPERTS, cache_size=48 * LAYERS, device=dev, quant_format="nvfp4"
            )
            c.set_bank_sources(sources)
            caches[spec.name] = c
    finally:
        for k, v in saved.items():
            os.environ.pop(k, None)
            if v is not None:
                os.environ[k] = v
    trace = C.zipf_routing_trace(warm + rounds * per_block, LAYERS, EXPERTS, top_k, zipf_exponent, seed=4).to(dev)
    static = {s.name: torch.empty((LAYERS, 1, top_k), dtype=torch.int32, device=dev) for s in specs}
    jit = dgm._jit_decode_gather_module

    def body(spec: StepSpec) -> None:
        dgm._jit_decode_gather_module = (lambda **kw: spec.module) if spec.module is not None else jit
        try:
            c = caches[spec.name]
            for layer in range(LAYERS):
                c.ensure_experts(layer, static[spec.name][layer])
                if spec.copy:
                    c.copy_missing()
        finally:
            dgm._jit_decode_gather_module = jit

    for t in range(warm):
        for spec in specs:
            static[spec.name].copy_(trace[t])
            body(spec)
    torch.cuda.synchronize()
    graphs = {}
    for spec in specs:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body(spec)
        graphs[spec.name] = g
    rt: dict[str, list[float]] = {s.name: [] for s in specs}
    ref = caches[specs[0].name]
    for r in range(rounds):
        for spec in specs if r % 2 == 0 else specs[::-1]:

            def block(name: str = spec.name) -> None:
                for k in range(per_block):
                    static[name].copy_(trace[warm + r * per_block + k])
                    graphs[name].replay()

            rt[spec.name].append(C.time_replays(block, 1) / per_block * 1e6)
        for spec in specs:
            if spec.copy:
                c = caches[spec.name]
                assert torch.equal(ref.slot_for_id, c.slot_for_id), f"round {r}: {spec.name} slot map differs"
                for g in geoms:
                    assert torch.equal(
                        ref.bank_caches[g.name].view(torch.uint8), c.bank_caches[g.name].view(torch.uint8)
                    ), f"round {r}: {spec.name} bank {g.name} differs"
    ratios = paired(rt, specs[0].name)
    return {name: {"median_us": median(v), "paired": ratios[name], "rounds": v} for name, v in rt.items()}


def print_step(results: dict[str, dict[str, Any]]) -> None:
    for name, v in results.items():
        print(f"step {name:14s} {v['median_us']:8.1f} us  paired {next(iter(results))}/this {v['paired']:.4f}", flush=True)


def save(log: dict[str, Any], filename: str) -> Path:
    """Write ``log`` plus the machine description to $OUT/filename (default /tmp)."""
    log["machine"] = C.machine_info()
    path = Path(os.environ.get("OUT", "/tmp")) / filename
    with open(path, "w") as fh:
        json.dump(log, fh, indent=1, default=str)
    print(f"wrote {path}", flush=True)
    return path
