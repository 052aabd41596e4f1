"""The captured decode step through the real OffloadMoeCache: one :class:`DecodeStep` holds, per
:class:`StepKernel` (its switch settings, optionally a JIT module that replaces a kernel's), one real
``OffloadMoeCache`` (NVFP4, the model's 40 layers x 256 experts) on the same pinned banks and top-8 Zipf trace
(calibrated with the LRU model for a ~10 % miss rate), and one captured graph of a decode step
(``ensure_experts`` + ``copy_missing`` per layer): ``step.time_block("tma", 0, 10)`` is µs per step.

``bench/test_bench_gather.py`` (the one decode-step A/B) and ``bench.step_pdl`` (the breakdown) build on it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
from typing import Any, Callable, Iterator, Mapping, Sequence

from suite.geometry import MODEL, NVFP4_ROW_BYTES, nvfp4_banks
from gpukit.memory import HostBanks, cache_reference_diff, cache_rows
from gpukit.routing import calibrate_zipf, zipf_routing_trace
from gpukit.timing import bench
from suite.kernels import RING_ENV, SWITCH_ENV, TMA_FACTORY, UPSTREAM_FACTORY, Kernel

GATHER_ENV = (SWITCH_ENV, RING_ENV)


def auto_pick(cache) -> dict[str, Any] | None:
    """``FREETOKEN_DECODE_GATHER=auto``'s pick in ``cache`` (its switch's ``AutoPick``, read from ``ft bench bw``'s
    profile) as JSON fields, no launcher; None without auto (the decode step, auto_stability and e2e record it)."""
    pick = getattr(getattr(cache, "_decode_gather_switch", None), "auto", None)
    return None if pick is None else {"label": pick.label, "line": pick.line, "entry": pick.entry}


@dataclasses.dataclass(frozen=True)
class StepKernel:
    name: str
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)  # FREETOKEN_* while the cache is built
    module: Any = None  # a JIT module that replaces decode_gather's for this cache's launches
    upstream_module: Any = None  # likewise for upstream's (a build of upstream's kernel)


#: ``upstream`` (FREETOKEN_DECODE_GATHER unset), ``upstream_aa`` (a second such cache: the A/A control)
#: and ``tma`` (decode_gather): the switch's own words.
DEFAULT_KERNELS = (StepKernel(Kernel.UPSTREAM), StepKernel(Kernel.UPSTREAM_AA),
                    StepKernel(Kernel.TMA, Kernel.TMA.env))  # fmt: skip


@dataclasses.dataclass(frozen=True)
class StepConfig:
    layers: int = MODEL["moe_layers"]
    experts: int = MODEL["experts"]
    top_k: int = MODEL["top_k"]
    batch: int = 1
    slots_per_layer: int = 48
    miss_rate: float = 0.10  # the LRU model's target; None-like 0 with zipf_exponent set skips calibration
    zipf_exponent: float | None = None  # None: calibrated for miss_rate
    source_layers: int = 8  # distinct pinned layers, used cyclically
    warm: int = 40  # eager steps before capture
    steps: int = 70  # trace steps after the warm-up (enough for rounds x steps per round)
    trace_seed: int = 4
    calibrate_seed: int = 3

    @property
    def cache_slots(self) -> int:
        return max(self.experts, self.slots_per_layer * self.layers)


@contextlib.contextmanager
def gather_env(env: Mapping[str, str]) -> Iterator[None]:
    """``FREETOKEN_DECODE_GATHER*`` exactly as ``env`` says for the duration (restored after)."""
    saved = {k: os.environ.pop(k) for k in GATHER_ENV if k in os.environ}
    try:
        os.environ.update(env)
        yield
    finally:
        for k in GATHER_ENV:
            os.environ.pop(k, None)
        os.environ.update(saved)


@contextlib.contextmanager
def kernel_modules(v: StepKernel) -> Iterator[None]:
    """The JIT factories answer ``v.module`` / ``v.upstream_module`` meanwhile (where set): launches
    traced or captured in the block use those modules."""
    from freetoken.kernel import decode_gather
    from freetoken.kernel import fast_index_copy

    wanted = ((decode_gather, TMA_FACTORY, v.module), (fast_index_copy, UPSTREAM_FACTORY, v.upstream_module))
    swaps = [(mod, attr, module) for mod, attr, module in wanted if module is not None]
    saved = [(mod, attr, getattr(mod, attr)) for mod, attr, _ in swaps]
    try:
        for mod, attr, module in swaps:
            setattr(mod, attr, lambda *a, _m=module, **kw: _m)
        yield
    finally:
        for mod, attr, orig in saved:
            setattr(mod, attr, orig)


def stage_misses(cache, dst, src) -> None:
    """The state ``ensure_experts`` leaves for ``copy_missing``: rows ``src`` -> slots ``dst``, the count on the device."""
    n = dst.numel()
    cache.evict_slots[:n].copy_(dst)
    cache.src_indices[:n].copy_(src)
    cache.num_indices.fill_(n)


def copy_all_layers(cache, layers: int) -> None:
    """``copy_missing`` of every layer with the staged miss list (the per-layer copy without the routing)."""
    for layer in range(layers):
        cache._pending_src_layer, cache._pending_whole_layer = layer, False  # as ensure_experts leaves them
        cache.copy_missing()


def expected_slots(sources: Sequence[Any], slots: int, dst, src, poison: int) -> list[Any]:
    """Per bank, a slot cache ``[slots, row]`` holding ``poison`` except rows ``sources[b][src]`` at ``dst``.

    ``sources`` are one layer's bank rows (``[experts, row_bytes]`` uint8, on the host or the device);
    the result lives on ``dst``'s device: what a poisoned cache must hold after the staged copy.
    """
    import torch

    out = []
    for bank in sources:
        e = torch.full((slots, bank.shape[1]), poison, dtype=torch.uint8, device=dst.device)
        e[dst.long()] = bank[src.to(bank.device).long()].to(dst.device)
        out.append(e)
    return out


class DecodeStep:
    """Caches, trace and captured step graphs of ``kernels`` (see the module docstring)."""

    def __init__(self, kernels: Sequence[StepKernel] = DEFAULT_KERNELS, config: StepConfig = StepConfig(), *,
                 device=None, banks: HostBanks | None = None, log: Callable[[str], None] | None = None):  # fmt: skip
        import torch

        self.torch, self.config, self.kernels = torch, config, list(kernels)
        self.device = torch.device(device if device is not None else "cuda")
        cfg = config
        self.own_banks = banks is None
        self.banks = banks or HostBanks(cfg.source_layers, cfg.experts, NVFP4_ROW_BYTES, self.device, seed=1)
        self.geoms = nvfp4_banks()
        if cfg.zipf_exponent is None:
            self.zipf_exponent, self.modelled_miss_rate = calibrate_zipf(
                cfg.miss_rate, steps=150, layers=cfg.layers, experts=cfg.experts, top_k=cfg.top_k,
                cache_size=cfg.cache_slots, warm_steps=50, seed=cfg.calibrate_seed,
            )  # fmt: skip
        else:
            self.zipf_exponent, self.modelled_miss_rate = cfg.zipf_exponent, None
        if log:
            log(f"decode step: Zipf exponent {self.zipf_exponent:.3f}, modelled LRU miss rate "
                f"{self.modelled_miss_rate}, {cfg.cache_slots} slots")  # fmt: skip
        self.trace = zipf_routing_trace(
            cfg.warm + cfg.steps, cfg.layers, cfg.experts, cfg.top_k, self.zipf_exponent,
            batch=cfg.batch, seed=cfg.trace_seed,
        ).to(self.device)  # fmt: skip
        self.caches = {v.name: self._make_cache(v) for v in self.kernels}
        self.static = {v.name: torch.empty((cfg.layers, cfg.batch, cfg.top_k), dtype=torch.int32, device=self.device)
                       for v in self.kernels}  # fmt: skip
        self.graphs: dict[str, Any] = {}
        self.warm_up()
        self.capture()

    def _make_cache(self, v: StepKernel):
        from freetoken.moe.offload_cache import OffloadMoeCache

        cfg, src = self.config, self.banks.layers
        typed = [self.banks.typed(layer % src, self.geoms) for layer in range(cfg.layers)]
        sources = {g.name: [typed[layer][g.name] for layer in range(cfg.layers)] for g in self.geoms}
        with gather_env(v.env):
            cache = OffloadMoeCache(
                num_layers=cfg.layers, num_experts=cfg.experts, cache_size=cfg.cache_slots,
                device=self.device, quant_format="nvfp4",
            )  # fmt: skip
        cache.set_bank_sources(sources)
        cache.collect_stats = True
        return cache

    def body(self, v: StepKernel) -> None:
        """One decode step of ``v``'s cache from its static routing buffer, layer by layer."""
        cache, ids = self.caches[v.name], self.static[v.name]
        with kernel_modules(v):
            for layer in range(self.config.layers):
                cache.ensure_experts(layer, ids[layer])
                cache.copy_missing()

    def warm_up(self) -> None:
        """``config.warm`` eager steps per kernel (JIT builds, descriptor checks), then fresh stats."""
        for t in range(self.config.warm):
            for v in self.kernels:
                self.static[v.name].copy_(self.trace[t])
                self.body(v)
        self.torch.cuda.synchronize(self.device)
        for c in self.caches.values():
            c.reset_stats()

    def capture(self) -> None:
        torch = self.torch
        for v in self.kernels:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                self.body(v)
            self.graphs[v.name] = g

    def replay(self, name: str, step: int) -> None:
        """Trace step ``warm + step`` through ``name``'s captured graph."""
        self.static[name].copy_(self.trace[self.config.warm + step])
        self.graphs[name].replay()

    def block(self, name: str, start: int, count: int) -> None:
        for k in range(count):
            self.replay(name, start + k)

    def time_block(self, name: str, start: int, count: int) -> float:
        """Device µs per step of ``count`` replays from an idle GPU."""
        return bench(lambda: self.block(name, start, count))[0] / count * 1e6

    def state_diff(self, a: str, b: str) -> str | None:
        """None when the two caches hold the same slot map, routed slots and bank bytes."""
        ca, cb = self.caches[a], self.caches[b]
        pairs = [("slot_for_id", ca.slot_for_id, cb.slot_for_id), ("id_of_slot", ca.id_of_slot, cb.id_of_slot),
                 ("the routed slots", self.static[a], self.static[b]),
                 *((f"bank {g.name}", cache_rows(ca, g.name), cache_rows(cb, g.name)) for g in self.geoms)]  # fmt: skip
        return next((f"{b}: {what} differs from {a}" for what, x, y in pairs if not self.torch.equal(x, y)), None)

    def reference_diff(self, name: str) -> str | None:
        """None when every resident slot of ``name``'s cache holds its source row (see cache_reference_diff)."""
        src = self.banks.layers
        dev = self.banks.dev
        return cache_reference_diff(self.caches[name], lambda layer: dev[layer % src], self.geoms, self.config.experts)

    def miss_stats(self) -> dict[str, Any]:
        return {name: c.decode_miss_stats() for name, c in self.caches.items()}

    def close(self) -> None:
        self.graphs.clear()
        if self.own_banks:
            self.banks.close()
