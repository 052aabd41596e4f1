"""What the probes share: per-layer gather graphs on one set of buffers, and the captured decode step.

Every timed set is byte-verified (the slot cache is poisoned before it); rounds alternate their
order; upstream is always timed twice, the second time as the A/A control.
"""

from __future__ import annotations

import json
import os
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
    """NVFP4 banks of SOURCES layers x EXPERTS experts in pinned host memory (plus a device copy, the
    reference), a SLOTS-row slot cache, and one device miss list that every layer of a graph uses."""

    def __init__(self, dev: torch.device):
        self.dev = dev
        rows = C.NVFP4_ROW_BYTES
        self.gsrc = [
            [torch.randint(0, 256, (EXPERTS, f), dtype=torch.uint8, device=dev) for f in rows] for _ in range(SOURCES)
        ]
        self.hsrc = [[t.cpu().pin_memory() for t in layer] for layer in self.gsrc]
        self.dst = [torch.empty((SLOTS, f), dtype=torch.uint8, device=dev) for f in rows]
        self.dst_ptrs = torch.tensor([t.data_ptr() for t in self.dst], dtype=torch.int64, device=dev)
        self.src_ptrs = [
            torch.tensor([t.data_ptr() for t in layer], dtype=torch.int64, device=dev) for layer in self.hsrc
        ]
        self.feat = torch.tensor(rows, dtype=torch.int64, device=dev)
        self.evict = torch.empty(SLOTS, dtype=torch.int32, device=dev)
        self.srci = torch.empty(SLOTS, dtype=torch.int32, device=dev)
        self.num = torch.zeros(1, dtype=torch.int64, device=dev)
        self.n = 0

    def args(self, layer: int) -> tuple:
        return (self.dst_ptrs, self.src_ptrs[layer % SOURCES], self.feat, self.evict, self.srci, self.num)

    def upstream(self, fic) -> Callable[[int], None]:
        return lambda layer: fic.fast_index_copy_multi_jit(
            *self.args(layer), num_threads=C.UPSTREAM_THREADS, blocks_per_bank=C.UPSTREAM_BLOCKS_PER_BANK
        )

    def ring(self, dgm, ring: C.Ring) -> Callable[[int], None]:
        return lambda layer: dgm.decode_gather_jit(*self.args(layer), **ring.kwargs())

    def module(self, module) -> Callable[[int], None]:
        return lambda layer: module.launch(*self.args(layer))

    def set_misses(self, n: int) -> None:
        g = torch.Generator(device=self.dev)
        g.manual_seed(n)
        perm = torch.randperm(SLOTS, device=self.dev, generator=g)[: max(n, 1)].to(torch.int32)
        self.evict.zero_()
        self.srci.zero_()
        self.evict[:n] = perm[:n]
        self.srci[:n] = torch.randint(0, EXPERTS, (n,), device=self.dev, dtype=torch.int32, generator=g)
        self.num.fill_(n)
        self.n = n

    def verify(self) -> bool:
        """Every miss row of every bank holds the last layer's source row (all layers write the same slots)."""
        torch.cuda.synchronize()
        n = self.n
        if n == 0:
            return True
        e, s = self.evict[:n].long(), self.srci[:n].long()
        last = self.gsrc[(layers_for(n) - 1) % SOURCES]
        return all(torch.equal(d[e], ref[s]) for d, ref in zip(self.dst, last))

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
        """µs per layer of every graph, ``rounds`` alternating rounds; sets of graphs that copy are verified."""
        n = self.n
        reps = 20 if n <= 2 else (10 if n <= 32 else 2)
        times: dict[Any, list[float]] = {k: [] for k in graphs}
        for r in range(rounds):
            for key in list(graphs) if r % 2 == 0 else list(graphs)[::-1]:
                g = graphs[key]
                for t in self.dst:
                    t.fill_(0xA5)
                g.replay()
                if copies(key):
                    assert self.verify(), f"n={n} {key}: slot cache differs from the reference"
                times[key].append(C.time_replays(g.replay, reps) / reps / layers_for(n) * 1e6)
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
