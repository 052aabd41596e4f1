"""Decode-gather benchmarks: pytest-benchmark records timed by the device clock, each carrying the paired
alternating-rounds verdict of its case.

    nox -s bench      # python -m pytest -rs bench/test_bench_gather.py --benchmark-timer=gpukit.timing.device_clock --bench-store
    nox -s compare    # upstream, A/A and tma per (regime, layers, n) from the saved JSON, with the paired verdict

Every timed kernel of every case is one pytest-benchmark benchmark (``benchmark.pedantic``: explicit rounds
and warm-up, timed by pytest-benchmark through ``--benchmark-timer=gpukit.timing.device_clock``, CUDA events
on the timing stream). Params ``regime``, ``layers``, ``n``, ``kernel``; the group ``<regime> L<layers>
n=<n>`` (the default ``--benchmark-group-by=group``, or ``--group-by=param:regime,param:layers,param:n``)
puts one case's kernels together. Kernels are the switch's words: ``upstream`` (FREETOKEN_DECODE_GATHER
unset: fast_index_copy_multi), ``upstream_aa`` (the A/A control: the same kernel captured again and
measured alike), ``tma`` (decode_gather), and in the replay regime ``copy_engine``.

Per-kernel statistics compare one kernel across versions and machines; what decides upstream against tma
is the paired result, measured first for each case in the same session on the same buffers and graphs:
paired alternating rounds (:func:`suite.rounds.run_rounds`, even rounds upstream, upstream_aa, tma, ...,
odd rounds reversed), ratio upstream/kernel, the A/A spread, the verdict (:mod:`suite.stats`). It is
in every record's ``extra_info["paired"]``, with regime, layers, n, bytes, GB/s, verified sets and the
series/tree.

Cases
-----
``decode`` (decides; :mod:`gpukit.decode_regime`): the model's banks at full size, a 40-layer graph, a
NEW miss list before every replay; a pedantic round is one replay (setup: the next list; teardown: the
replay's rows verified and poisoned again). ``replay`` (labelled: it warms what a decode step finds
cold): one captured graph of ``layers`` launches over ``BENCH_SOURCES`` pinned layers sharing one miss
list; a pedantic round is ``reps`` replays (~BENCH_TARGET_MS), the slot cache verified and poisoned
after every round. ``step``: one decode step through the real OffloadMoeCache
(:mod:`gpukit.decode_step`), a pedantic round is one trace step; the caches must end with the same slot
map and bytes. Records are per replay (all layers) or per step: divide by ``layers`` for per layer.

Knobs (environment): BENCH_N_DECODE (0,1,2,4,8,32), BENCH_BANKS_GIB (unset: the full footprint),
BENCH_N40 (0,1,2,4,8,16,32), BENCH_N_BIG (600), BENCH_BIG_LAYERS (4), BENCH_N16 (0,1,2,4,8), BENCH_ROUNDS
(7, paired rounds), BENCH_PEDANTIC_SETS (3: decode-regime pedantic rounds per kernel, in sets of the
paired rounds' replays), BENCH_SOURCES (8), BENCH_TARGET_MS (20), BENCH_DECODE (1; 0 skips the step),
BENCH_DECODE_SLOTS_PER_LAYER (48), BENCH_STEP_ROUNDS (30, pedantic steps per kernel), BENCH_STEP_PDL (0;
1 adds the PDL builds of bench.step_pdl to the step: ``tma_pdl``, ``upstream_pdl``).
"""

from __future__ import annotations

import functools
import logging
import os
import random
import time
from typing import Any, Callable

import pytest

from bench.conftest import RUN_INFO
from gpukit.decode_regime import Footprint, ModelBanks, RegimeGraphs, poisoned_slots, replays_per_set
from gpukit.decode_step import DEFAULT_KERNELS, DecodeStep, StepConfig, StepKernel, auto_pick
from suite.geometry import MODEL, NVFP4_EXPERT_BYTES, NVFP4_ROW_BYTES, UPSTREAM_BLOCKS_PER_BANK, UPSTREAM_THREADS
from gpukit.launch import call_tma, call_upstream, default_ring, load_kernels, precompile, runs_ring
from gpukit.machine import machine_info
from gpukit.memory import HostBanks, MissList, SlotCache, check_slot_cache, poison_value, random_misses
from gpukit import timing
from gpukit.timing import copy_engine_ceiling, device_clock, reps_for
from suite import results
from suite.rounds import Rounds, run_rounds
from suite.models import paired as paired_result
from suite.kernels import AA, BASE, Kernel

pytestmark = [pytest.mark.gpu, pytest.mark.slow]
log = logging.getLogger("bench")


def _ints(name: str, default: str) -> list[int]:
    return [int(x) for x in os.environ.get(name, default).split(",") if x.strip()]


N40 = _ints("BENCH_N40", "0,1,2,4,8,16,32")
N_BIG = _ints("BENCH_N_BIG", "600")
BIG_LAYERS = int(os.environ.get("BENCH_BIG_LAYERS", "4"))
N16 = _ints("BENCH_N16", "0,1,2,4,8")
ROUNDS = max(5, int(os.environ.get("BENCH_ROUNDS", "7")))
PEDANTIC_SETS = max(1, int(os.environ.get("BENCH_PEDANTIC_SETS", "3")))
SOURCES = int(os.environ.get("BENCH_SOURCES", "8"))
TARGET_S = float(os.environ.get("BENCH_TARGET_MS", "20")) / 1e3
DECODE = os.environ.get("BENCH_DECODE", "1") != "0"
DECODE_SLOTS_PER_LAYER = int(os.environ.get("BENCH_DECODE_SLOTS_PER_LAYER", "48"))
STEP_ROUNDS = max(5, int(os.environ.get("BENCH_STEP_ROUNDS", "30")))
STEP_PDL = os.environ.get("BENCH_STEP_PDL", "0") == "1"
N_DECODE = _ints("BENCH_N_DECODE", "0,1,2,4,8,32")
BANKS_GIB = float(os.environ["BENCH_BANKS_GIB"]) if os.environ.get("BENCH_BANKS_GIB") else None

SLOTS = 640
EXPERTS = MODEL["experts"]
GATHER_KERNELS = (BASE, AA, Kernel.TMA)  # round order; the replay regime adds copy_engine where n > 0
#: the step's caches: upstream, its A/A control, tma, and auto (FREETOKEN_DECODE_GATHER=auto: the kernel ft bench
#: bw's profile picked for this GPU, upstream's without one; what it runs goes to the step's extra_info)
STEP = (*DEFAULT_KERNELS, StepKernel(Kernel.AUTO, Kernel.AUTO.env))
STEP_KERNELS = tuple(v.name for v in STEP) + (("tma_pdl", "upstream_pdl") if STEP_PDL else ())
STEP_BLOCK = 10  # trace steps per paired round of the decode step


def _params(regime: str, cases: list[tuple[int, int]]) -> list[Any]:
    out = []
    for layers, n in cases:
        kernels = GATHER_KERNELS + ((Kernel.COPY_ENGINE,) if regime == "replay" and n > 0 else ())
        out += [pytest.param(regime, layers, n, k, id=f"{regime}-L{layers}-n{n}-{k}") for k in kernels]
    return out


GATHER_PARAMS = _params("decode", [(40, n) for n in N_DECODE]) + _params(
    "replay", [(40, n) for n in N40] + [(BIG_LAYERS, n) for n in N_BIG] + [(16, n) for n in N16]
)
STEP_PARAMS = [pytest.param("step", MODEL["moe_layers"], "zipf", k, id=f"step-L40-zipf-{k}") for k in STEP_KERNELS]


def paired(rounds: Rounds, **extra: Any) -> dict[str, Any]:
    """The paired-rounds result of one case (:func:`suite.models.paired`, the one shape ``bench/step_pdl.py``
    writes too): per kernel its :class:`suite.stats.Comparison` against upstream, the A/A ratios and A/A spread,
    medians and every round."""
    return paired_result(rounds, **extra).to_doc()


class Case:
    """One (regime, layers, n): its graphs, its paired result, and a pedantic plan per kernel."""

    def __init__(self, regime: str, layers: int, n: int, bytes_: int, pair: dict[str, Any], reps: int = 1):
        self.regime, self.layers, self.n, self.bytes, self.paired, self.reps = regime, layers, n, bytes_, pair, reps
        self.plans: dict[str, dict[str, Any]] = {}  # kernel -> benchmark.pedantic's keyword arguments
        self.verified = {"sets": 0}
        self.paired_sets = 0  # verified sets of the paired rounds (and the warm replays)
        self.close: Callable[[], None] = lambda: None


class Bench:
    """What the benchmarks share: kernels, pinned banks, slot caches, the ceiling, the current case."""

    def __init__(self):
        import torch

        self.torch = torch
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.decode_gather, self.fast_index_copy = load_kernels()
        self.ring = default_ring(self.decode_gather)
        errors = precompile(self.decode_gather, self.fast_index_copy, [self.ring], progress=log.info)
        assert not errors, errors
        self.banks = HostBanks(SOURCES, EXPERTS, NVFP4_ROW_BYTES, self.device, seed=1)
        self.cache = SlotCache(SLOTS, NVFP4_ROW_BYTES, self.device)
        self.misses = MissList(SLOTS, "int32", self.device)
        self.ceiling = {"start": copy_engine_ceiling(256 << 20, device=self.device)}
        assert self.ceiling["start"]["verified"], "copy-engine ceiling copy was not exact"
        log.info("copy-engine ceiling (256 MiB H2D): %.2f GB/s", self.ceiling["start"]["gbps"])
        self.model_banks: tuple[ModelBanks, Any] | None = None
        self.case: Case | None = None
        self.step: DecodeStep | None = None
        self.verified = {"timed_sets": 0, "bytes": 0}

    def enter(self, key: tuple, make: Callable[[], Case]) -> Case:
        """The case ``key``, made (and the previous one's graphs freed) when it changes."""
        if self.case is None or (self.case.regime, self.case.layers, self.case.n) != key:
            if self.case is not None:
                self.case.close()
            self.case = make()
        return self.case

    def count(self, case: Case, sets: int) -> None:
        """``sets`` verified timed sets of ``case`` into the run's totals (each checked one replay's rows)."""
        self.verified["timed_sets"] += sets
        self.verified["bytes"] += sets * case.bytes

    def run_info(self) -> dict[str, Any]:
        info = machine_info()
        return {
            "machine": {**info, **{k: v for k, v in self.ceiling["start"].items() if k.startswith("pcie_")}},
            "provenance": results.provenance(),
            "kernel": {"tma_default_ring": self.ring._asdict(),
                       "upstream": {"num_threads": UPSTREAM_THREADS, "blocks_per_bank": UPSTREAM_BLOCKS_PER_BANK}},
            "geometry": {"model": MODEL, "bytes_per_expert": NVFP4_EXPERT_BYTES, "slots": SLOTS,
                         "source_layers": SOURCES, "pinned": self.banks.buf.describe()},
            "ceiling": {k: {kk: vv for kk, vv in v.items() if kk != "seconds"} for k, v in self.ceiling.items()},
            "method": {
                "timer": "gpukit.timing.device_clock: CUDA events on the timing stream, each read waits for its event",
                "paired": "per case, paired alternating rounds (even rounds upstream, upstream_aa, tma[, copy_engine];"
                " odd reversed); ratio = median(upstream) / median(kernel); tie: |ratio - 1| <= A/A spread",
                "rounds": ROUNDS, "pedantic_sets": PEDANTIC_SETS, "step_rounds": STEP_ROUNDS,
                "target_ms_per_replay_round": TARGET_S * 1e3,
            },
            "verified": self.verified,
        }  # fmt: skip

    # ------------------------------------------------------------------ the replay regime

    def replay_case(self, layers: int, n: int) -> Case:
        torch, banks, cache, misses = self.torch, self.banks, self.cache, self.misses
        dst, src = random_misses(random.Random(f"bench-{layers}-{n}"), SLOTS, n, SLOTS, EXPERTS)
        misses.set(dst, src, n)
        writes = [(dst[:n], src[:n], banks.dev[(layers - 1) % SOURCES])]  # every layer writes the same slots

        def launcher(call, module):
            return lambda layer: call(module, cache, banks.src_ptrs[layer % SOURCES], misses.dst, misses.src, misses.num)

        fns = {BASE: launcher(call_upstream, self.fast_index_copy), AA: launcher(call_upstream, self.fast_index_copy),
               Kernel.TMA: launcher(call_tma, self.decode_gather)}  # fmt: skip
        for layer in range(layers):  # eager warm-up; decode_gather checks every source descriptor here
            fns[BASE](layer), fns[Kernel.TMA](layer)
        torch.cuda.synchronize()
        graphs = {}
        for name, fn in fns.items():
            graphs[name] = g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for layer in range(layers):
                    fn(layer)
        if n > 0:
            from gpukit.runtime import memcpy_h2d_async

            graphs[Kernel.COPY_ENGINE] = g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                stream = torch.cuda.current_stream().cuda_stream
                for layer in range(layers):
                    host = banks.host[layer % SOURCES]
                    for i in range(n):
                        for b, row in enumerate(banks.row_bytes):
                            memcpy_h2d_async(cache.dst[b][dst[i]].data_ptr(), host[b][src[i]].data_ptr(), row, stream)
        rng, verified = random.Random(f"poison-{layers}-{n}"), {"sets": 0, "poison": 0}

        def poison() -> None:
            verified["poison"] = poison_value(verified["sets"], rng)
            cache.poison(verified["poison"])

        def verify(name: str) -> None:  # then poisoned again for the next set
            err = check_slot_cache(cache, verified["poison"], writes)
            assert err is None, f"{name} L{layers} n={n}: {err}"
            verified["sets"] += 1
            poison()

        poison()
        for name, g in graphs.items():  # warm replays, each verified
            g.replay()
            verify(name)
        reps = reps_for(TARGET_S, timing.bench(graphs[BASE].replay)[0], 3, 400)
        poison()  # the estimate's replay wrote rows: every timed set starts from a poisoned cache

        def timed(name: str) -> Callable[[int], float]:
            def set_us(_round: int) -> float:
                seconds = timing.bench(graphs[name].replay, reps=reps)[0]
                verify(name)
                return seconds / reps / layers * 1e6

            return set_us

        names = [k for k in (*GATHER_KERNELS, Kernel.COPY_ENGINE) if k in graphs]
        rounds = run_rounds({k: timed(k) for k in names}, ROUNDS, base=BASE, aa=AA)
        case = Case("replay", layers, n, layers * n * NVFP4_EXPERT_BYTES, paired(rounds, reps=reps), reps)
        case.verified, case.paired_sets = verified, verified["sets"]
        for name in names:
            case.plans[name] = {"target": graphs[name].replay, "iterations": reps, "rounds": ROUNDS,
                                "warmup_rounds": 1, "teardown": functools.partial(verify, name)}  # fmt: skip
        case.close = graphs.clear
        self.count(case, verified["sets"])
        return case

    # ------------------------------------------------------------------ the decode regime

    def decode_case(self, layers: int, n: int) -> Case:
        if self.model_banks is None:
            t0 = time.perf_counter()
            fp = Footprint.scaled(BANKS_GIB)
            self.model_banks = (ModelBanks(fp, self.device, progress=log.info), poisoned_slots(fp.row_bytes, self.device))
            log.info("decode-regime banks: %s in %.0fs", fp.describe(), time.perf_counter() - t0)
        banks, slots = self.model_banks
        rg = RegimeGraphs(banks, slots, n, layers=layers)
        launch = {BASE: functools.partial(call_upstream, self.fast_index_copy), AA: functools.partial(call_upstream, self.fast_index_copy),
                  Kernel.TMA: functools.partial(call_tma, self.decode_gather)}  # fmt: skip
        for name, fn in launch.items():
            rg.capture(name, fn)
        reps = replays_per_set(n)
        rounds = rg.rounds(list(GATHER_KERNELS), "decode", ROUNDS, reps, base=BASE, aa=AA)
        case = Case("decode", rg.layers, n, rg.layers * n * NVFP4_EXPERT_BYTES,
                    paired(rounds, reps=reps, footprint=banks.fp.describe()), 1)  # fmt: skip
        case.verified = rg_sets = {"sets": rg.verified}
        case.paired_sets = rg.verified

        def teardown(name: str) -> None:
            rg.verify(name)
            rg_sets["sets"] = rg.verified

        for name in GATHER_KERNELS:
            case.plans[name] = {"target": rg.graphs[name].replay, "setup": rg.next_list, "rounds": reps * PEDANTIC_SETS,
                                "warmup_rounds": 1, "teardown": functools.partial(teardown, name)}  # fmt: skip

        def close() -> None:
            rg.check_clean("pedantic rounds")
            rg.graphs.clear()

        case.close = close
        self.count(case, rg.verified)
        return case

    # ------------------------------------------------------------------ the decode step

    def step_case(self) -> Case:
        kernels = list(STEP)
        if STEP_PDL:
            from bench.step_pdl import pdl_kernels

            kernels += pdl_kernels()
        start = ROUNDS * STEP_BLOCK
        config = StepConfig(slots_per_layer=DECODE_SLOTS_PER_LAYER, source_layers=SOURCES,
                            steps=start + STEP_ROUNDS + 1)  # fmt: skip
        step = self.step = DecodeStep(kernels, config, device=self.device, banks=self.banks, log=log.info)
        assert runs_ring(step.caches[Kernel.TMA]), "the tma cache does not use decode_gather"
        names = [v.name for v in kernels]

        def states_agree(r: int) -> None:
            for other in names[1:]:
                err = step.state_diff(names[0], other)
                assert err is None, f"block {r}: {err}"

        timed = {k: (lambda r, k=k: step.time_block(k, r * STEP_BLOCK, STEP_BLOCK)) for k in names}
        rounds = run_rounds(timed, ROUNDS, base=BASE, aa=AA, after_round=states_agree)
        same_misses(step)
        err = step.reference_diff(Kernel.TMA)
        assert err is None, f"decode step: {err}"
        stats = step.miss_stats()[Kernel.TMA]
        misses = stats["missing_per_layer"] * config.layers
        extra = {"steps_per_round": STEP_BLOCK, "miss_rate": stats["miss_rate"], "misses_per_step": misses,
                 "zipf_exponent": step.zipf_exponent, "modelled_miss_rate": step.modelled_miss_rate,
                 "cache_slots": config.cache_slots, "top_k": config.top_k, "batch": config.batch,
                 "ideal_copy_us_per_step": misses * NVFP4_EXPERT_BYTES / (self.ceiling["start"]["gbps"] * 1e9) * 1e6,
                 "auto_choice": results.scrub(auto_pick(step.caches[Kernel.AUTO]))}  # fmt: skip
        case = Case("step", config.layers, "zipf", round(misses * NVFP4_EXPERT_BYTES), paired(rounds, **extra))
        counter = {k: start for k in names}

        def next_step(name: str) -> tuple[tuple[int], dict]:
            counter[name] += 1
            return (counter[name] - 1,), {}

        for name in names:
            case.plans[name] = {"target": functools.partial(step.replay, name), "rounds": STEP_ROUNDS, "warmup_rounds": 1,
                                "setup": functools.partial(next_step, name)}  # fmt: skip

        def close() -> None:  # every cache replayed the same steps: same state and misses, every slot its source row
            states_agree(-1)
            same_misses(step)
            for k in names:
                assert step.reference_diff(k) is None, f"decode step {k}: {step.reference_diff(k)}"
            step.close()

        case.close = close
        return case


def same_misses(step: DecodeStep) -> None:
    stats = step.miss_stats()
    assert all(v == stats[Kernel.TMA] for v in stats.values()), stats


@pytest.fixture(scope="module")
def bench(request):
    b = Bench()
    yield b
    try:
        if b.case is not None:
            b.case.close()  # the last case's checks
    finally:
        b.ceiling["end"] = copy_engine_ceiling(256 << 20, device=b.device)
        log.info("copy-engine ceiling at the end: %.2f GB/s", b.ceiling["end"]["gbps"])
        request.config.stash[RUN_INFO] = b.run_info()
        b.banks.close()
        if b.model_banks is not None:
            b.model_banks[0].close()


def record(bench: Bench, benchmark, case: Case, kernel: str) -> None:
    """``benchmark.pedantic`` of ``kernel``'s plan, then its ``extra_info``; a timer other than the device
    clock is refused (the records would be host time)."""
    if benchmark.enabled and benchmark._timer is not device_clock:
        pytest.fail("the benchmarks need --benchmark-timer=gpukit.timing.device_clock (nox -s bench passes it)")
    benchmark.group = f"{case.regime} L{case.layers} n={case.n}"
    sets_before = case.verified["sets"]
    benchmark.pedantic(**case.plans[kernel])
    bench.count(case, case.verified["sets"] - sets_before)
    stats = benchmark.stats.stats if benchmark.stats is not None else None
    median_s = stats.median if stats is not None else None
    prov = results.provenance()
    benchmark.extra_info.update({
        "regime": case.regime, "layers": case.layers, "n": case.n, "kernel": kernel,
        "unit": "seconds per replay (all layers)" if case.regime != "step" else "seconds per decode step",
        "bytes": case.bytes,
        "gbps": case.bytes / median_s / 1e9 if median_s and case.bytes else None,
        "median_us_per_layer": median_s / case.layers * 1e6 if median_s else None,
        "verified_sets": case.verified["sets"] - sets_before,
        "series": prov.get("series_hash"), "tree": prov.get("tree"),
        "paired": case.paired,
    })  # fmt: skip


@pytest.mark.parametrize("regime,layers,n,kernel", GATHER_PARAMS)
def test_gather(bench, benchmark, regime, layers, n, kernel):
    make = bench.decode_case if regime == "decode" else bench.replay_case
    case = bench.enter((regime, layers, n), functools.partial(make, layers, n))
    record(bench, benchmark, case, kernel)
    checks = n or regime == "replay"  # decode regime, n = 0: no rows to check (each set still checked clean)
    if checks:  # every paired set and every pedantic round of this kernel was byte-verified
        assert case.paired_sets >= ROUNDS * len(case.paired["rounds_us"]), case.paired_sets
    if checks and benchmark.enabled:
        assert benchmark.extra_info["verified_sets"] >= case.plans[kernel]["rounds"], benchmark.extra_info


@pytest.mark.skipif(not DECODE, reason="BENCH_DECODE=0")
@pytest.mark.parametrize("regime,layers,n,kernel", STEP_PARAMS)
def test_decode_step(bench, benchmark, regime, layers, n, kernel):
    case = bench.enter((regime, layers, n), bench.step_case)
    record(bench, benchmark, case, kernel)
    assert len(case.paired["rounds_us"][kernel]) == ROUNDS
