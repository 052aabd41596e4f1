"""What the probes share: per-layer gather graphs on one set of buffers, and the captured decode step.

Every timed set is byte-verified (the slot cache is poisoned before it); rounds alternate their
order; upstream is always timed twice, the second time as the A/A control.
"""

from __future__ import annotations

import logging
import os
import random
import statistics
from pathlib import Path
from typing import Any, Callable

import torch

from gpukit.decode_step import DecodeStep, StepConfig, StepVariant
from suite.geometry import NVFP4_ROW_BYTES, UPSTREAM_THREADS, Ring
from gpukit.kernels import call_tma, call_upstream
from gpukit.machine import machine_info
from gpukit.memory import HostBanks, MissList, SlotCache, check_slot_cache, poison_value, random_misses
from suite.results import document, write_json
from suite.rounds import run_rounds
from gpukit.timing import bench

logger = logging.getLogger(__name__)

LAYERS, SOURCES, EXPERTS, SLOTS = 40, 4, 256, 640
BIG_LAYERS = 4  # n > 32: 40 layers of 600 experts would move 43 GB per replay
median = statistics.median


def layers_for(n: int) -> int:
    return BIG_LAYERS if n > 32 else LAYERS


def paired(times: dict[Any, list[float]], base: Any) -> dict[Any, float]:
    """Median over rounds of base / key (> 1: key faster than base)."""
    return {k: median([a / b for a, b in zip(times[base], v)]) for k, v in times.items()}


class Gather:
    """The benchmark's own buffers (gpukit.memory): NVFP4 banks of SOURCES layers x EXPERTS experts
    in pinned host memory with their device reference, a guarded SLOTS-row slot cache, and one device
    miss list that every layer of a graph uses (so the last layer's rows are what the cache must hold)."""

    def __init__(self, dev: torch.device):
        self.banks = HostBanks(SOURCES, EXPERTS, NVFP4_ROW_BYTES, dev, seed=1)
        self.cache = SlotCache(SLOTS, NVFP4_ROW_BYTES, dev)
        self.misses = MissList(SLOTS, "int32", dev)
        self.n = 0
        self.writes: list = []
        self.sets = 0

    def _call(self, layer: int) -> tuple:
        m = self.misses
        return self.cache, self.banks.src_ptrs[layer % SOURCES], m.dst, m.src, m.num

    def upstream(self, fic) -> Callable[[int], None]:
        return lambda layer: call_upstream(fic, *self._call(layer))

    def ring(self, dgm, ring: Ring) -> Callable[[int], None]:
        return lambda layer: call_tma(dgm, *self._call(layer), ring)

    def module(self, module) -> Callable[[int], None]:
        """A JIT module with decode_gather's launch signature (a kernel variant)."""

        def launch(layer: int) -> None:
            cache, src_ptrs, dst, src, num = self._call(layer)
            module.launch(cache.dst_ptrs, src_ptrs, cache.feat, dst, src, num)

        return launch

    def set_misses(self, n: int) -> None:
        dst, src = random_misses(random.Random(f"probe-{n}"), SLOTS, n, SLOTS, EXPERTS)
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

        def timed(key: Any) -> Callable[[int], float]:
            def set_us(_round: int) -> float:
                poison = poison_value(self.sets)
                self.sets += 1
                self.cache.poison(poison)
                graphs[key].replay()
                if copies(key):
                    torch.cuda.synchronize()
                    err = check_slot_cache(self.cache, poison, self.writes)
                    assert err is None, f"n={n} {key}: {err}"
                return bench(graphs[key].replay, reps=reps)[0] / reps / layers_for(n) * 1e6

            return set_us

        return run_rounds({key: timed(key) for key in graphs}, rounds).values


def touch_offsets(base: torch.Tensor, rows: torch.Tensor, feat: int, stride: int) -> torch.Tensor:
    """Byte offsets from ``base`` (int64 ``[L]``: a bank's base address per layer) of one address in
    every ``stride``-aligned block that each row of ``rows`` (``[L, n]``, ``feat`` bytes each) spans:
    the row's start, then every block boundary inside it. ``[L, n * K]`` int64, K the most blocks a
    row can span (a row spanning fewer repeats its last block). 16-byte aligned when ``base``,
    ``feat`` and ``stride`` are."""
    start = base[:, None] + rows.long() * feat
    first, last = start // stride, (start + feat - 1) // stride
    k = torch.arange(feat // stride + 2, device=rows.device)
    block = torch.minimum(first[..., None] + k, last[..., None])
    addr = torch.maximum(block * stride, start[..., None])
    return (addr - base[:, None, None]).reshape(rows.shape[0], -1)


def page_toucher(fic, rg, stride: int) -> Callable[[Any], None]:
    """A ``prepare`` hook for gpukit.decode_regime.RegimeGraphs: reads 16 bytes in every
    ``stride``-aligned block of the current miss list's host rows (touch_offsets) with upstream's
    kernel on a 16-byte-row descriptor of each layer's bank, one launch per layer and bank, into a
    scratch buffer (the last layer's bytes checked against the bank). It runs before the clock starts,
    so the timed replay finds warm whatever a first read of each block warms (its address translations,
    above all) and almost none of the rows' bytes."""
    fp, dev = rg.banks.fp, rg.banks.device
    count = max(r // stride + 2 for r in fp.row_bytes) * max(rg.n, 1)
    scratch = torch.empty(count * 16, dtype=torch.uint8, device=dev)
    dst_ptrs = torch.tensor([scratch.data_ptr()], dtype=torch.int64, device=dev)
    feat16 = torch.tensor([16], dtype=torch.int64, device=dev)
    bases = [torch.stack([p[b] for p in rg.banks.src_ptrs[: rg.layers]]) for b in range(len(fp.row_bytes))]
    # per bank: the scratch rows and the count of one call (n rows x the blocks a row can span)
    dsts = [torch.arange(rg.n * (feat // stride + 2), dtype=torch.int32, device=dev) for feat in fp.row_bytes]
    nums = [torch.tensor([d.numel()], dtype=torch.int64, device=dev) for d in dsts]

    def touch(g) -> None:
        if g.n == 0:
            return
        rows = g.src[:, : g.n]
        for b, feat in enumerate(fp.row_bytes):
            idx = (touch_offsets(bases[b], rows, feat, stride) // 16).to(torch.int32)
            dst, num = dsts[b], nums[b]
            for layer in range(g.layers):
                fic.fast_index_copy_multi_jit(dst_ptrs, g.banks.src_ptrs[layer][b : b + 1], feat16, dst, idx[layer], num,
                                              num_threads=UPSTREAM_THREADS, blocks_per_bank=1)  # fmt: skip
            # the last layer's touch read what its bank holds there (the device reference of the bank)
            want = g.banks.ref[b][g.layers - 1].view(-1)[(idx[-1].long() * 16)[:, None] + torch.arange(16, device=dev)]
            if not torch.equal(scratch[: want.numel()].view(-1, 16), want):
                raise AssertionError(f"page touch, bank {b}: the bytes read differ from the bank's")

    touch.scratch = scratch  # keeps the buffer alive with the hook
    return touch


def decode_step(specs: list[StepVariant], *, rounds: int = 7, per_block: int = 10, warm: int = 40,
                zipf_exponent: float = 1.867) -> dict[str, dict[str, Any]]:
    """The captured decode step of gpukit.decode_step (40 layers, top-8 Zipf routing at a ~10% miss rate;
    the exponent fixed, not recalibrated) of one real OffloadMoeCache per spec, on the same banks and
    trace; µs per step per round, and the median of specs[0] / spec per round. After every round each
    copying cache must hold the same slot map and bank bytes as specs[0]'s."""
    config = StepConfig(zipf_exponent=zipf_exponent, source_layers=SOURCES, warm=warm, steps=rounds * per_block)
    step = DecodeStep(specs, config)
    ref = specs[0].name

    def states_agree(r: int) -> None:
        for spec in specs[1:]:
            if spec.copy:
                err = step.state_diff(ref, spec.name)
                assert err is None, f"round {r}: {err}"

    rt = run_rounds({s.name: (lambda r, name=s.name: step.time_block(name, r * per_block, per_block)) for s in specs},
                    rounds, after_round=states_agree).values  # fmt: skip
    step.close()
    ratios = paired(rt, ref)
    return {name: {"median_us": median(v), "paired": ratios[name], "rounds": v} for name, v in rt.items()}


def print_step(results: dict[str, dict[str, Any]]) -> None:
    for name, v in results.items():
        logger.info(f"step {name:14s} {v['median_us']:8.1f} us  paired {next(iter(results))}/this {v['paired']:.4f}")


def save(log: dict[str, Any], filename: str) -> Path:
    """Write ``log`` plus the machine and provenance to $OUT/filename (default: the current directory)."""
    path = write_json(Path(os.environ.get("OUT", ".")) / filename, document("probe", machine=machine_info(), **log))
    logger.info(f"wrote {path}")
    return path


def call_module(module, cache: SlotCache, src_ptrs, dst, src, num, *extra) -> None:
    """Any JIT module with decode_gather's launch signature (a kernel variant a caller built) on ``cache``;
    ``extra`` follows the shared arguments (a fast_index_copy_multi variant's wait flag)."""
    module.launch(cache.dst_ptrs, src_ptrs, cache.feat, dst, src, num, *extra)
