"""Decode-gather benchmarks: device-event timings in paired alternating rounds, into results/<device>/bench.json.

    nox -s bench                         # or: python -m pytest -rs bench/test_bench_gather.py
    nox -s compare                       # upstream vs decode_gather per (regime, layers, n) from bench.json

What is measured
----------------
``test_gather_decode[decode-L40-n<n>]`` (the regime that decides): :mod:`gpukit.decode_regime`. The
model's full bank footprint (40 layers x 256 experts of NVFP4 rows, 18.2 GB, allocated as FreeToken's
host_banks does: mmap, fill, cudaHostRegister; ``BENCH_BANKS_GIB`` caps it for hosts with less RAM),
every layer its own banks and its own miss list of ``n`` experts, and a NEW miss list written into the
captured index tensors before every replay, as a decode step has; each replay timed alone and
verified. Variants upstream, upstream_aa, ours (the copy engine's per-row nodes are fixed at capture,
so it cannot follow a device-side list and is measured in the replay regime only).

The replay regime (labelled ``regime = replay``; it warms what a decode step finds cold and flatters a
kernel that pays for cold rows):
``test_gather_graph[L<layers>-n<n>]``: one captured CUDA graph of ``layers`` gather launches, each
layer reading its own pinned source (``BENCH_SOURCES`` distinct layers of the NVFP4 banks, used
cyclically), all layers sharing one device miss list of ``n`` experts (1,781,760 B each) -- the
decode step's copy with the routing kernel taken out. Four variants, each its own graph:

  upstream      fast_index_copy_multi, 1024 threads x 8 blocks per bank (the cache's default)
  upstream_aa   the same kernel captured again: the A/A control, the noise floor of the comparison
  ours          decode_gather with the module's default ring
  copy_engine   the same rows as per-row cudaMemcpyAsync nodes (host-driven, rows fixed at capture)

Rounds are paired and alternate: even rounds run upstream, upstream_aa, ours, copy_engine; odd
rounds the reverse. A round of one variant replays its graph ``reps`` times between two CUDA events
from an idle GPU (reps chosen so a timed set lasts ~BENCH_TARGET_MS), and the round's value is the
device time per layer. The slot cache is poisoned before and byte-verified after EVERY timed set.
A case is measured once, all variants together (:func:`suite.rounds.run_rounds`). Each case is one
row of ``bench.json`` (:mod:`suite.results`, the one store of these figures), keyed by ``regime``,
``layers`` and ``n``: per-round and median times, the speedup upstream/ours, the A/A ratios and
spread, the verdict, GB/s and the share of the copy-engine ceiling. n = 600 runs in a
``BENCH_BIG_LAYERS``-layer graph (4 by default): 40 layers x 600 experts would move 43 GB per replay.

``test_decode_step_offload_cache``: the real OffloadMoeCache, 40 layers, 256 experts, top-8,
batch 1, routing from a Zipf trace whose exponent is calibrated (LRU model) for a ~10 % miss rate;
one captured decode-step graph (ensure_experts + copy_missing per layer) per cache
(:mod:`gpukit.decode_step`), ``FREETOKEN_DECODE_GATHER`` unset, unset again (A/A) and ``tma``, paired
alternating blocks of steps, the caches' slot maps and slot-cache bytes compared after every block.

Knobs (environment): BENCH_N_DECODE (0,1,2,4,8,32), BENCH_BANKS_GIB (unset: the full footprint), BENCH_N40 (0,1,2,4,8,16,32), BENCH_N_BIG (600), BENCH_BIG_LAYERS (4),
BENCH_N16 (0,1,2,4,8), BENCH_ROUNDS (7), BENCH_SOURCES (8), BENCH_TARGET_MS (20),
BENCH_DECODE (1; 0 skips the decode-step benchmark), BENCH_DECODE_SLOTS_PER_LAYER (48); the file goes
where :mod:`suite.results` says (``$FT_RESULTS_DIR`` moves the results tree).
"""

from __future__ import annotations

import functools
import os
import random
import sys
import time
from typing import Any

import pytest

from gpukit.cudart import memcpy_h2d_async
from gpukit.decode_regime import Footprint, ModelBanks, RegimeGraphs, poisoned_slots, replays_per_set
from gpukit.decode_step import DEFAULT_VARIANTS, DecodeStep, StepConfig
from gpukit.geometry import (
    MODEL,
    NVFP4_EXPERT_BYTES,
    NVFP4_ROW_BYTES,
    UPSTREAM_BLOCKS_PER_BANK,
    UPSTREAM_THREADS,
    nvfp4_banks,
)
from gpukit.kernels import call_ours, call_upstream, default_ring, load_kernels, precompile
from gpukit.machine import machine_info
from gpukit.memory import (
    HostBanks,
    MissList,
    SlotCache,
    check_slot_cache,
    poison_value,
    random_misses,
)
from suite import results
from suite.rounds import run_rounds
from suite.stats import summarize_rounds
from gpukit.timing import copy_engine_ceiling, reps_for, time_replays

pytestmark = [pytest.mark.gpu, pytest.mark.slow]


def _ints(name: str, default: str) -> list[int]:
    return [int(x) for x in os.environ.get(name, default).split(",") if x.strip()]


N40 = _ints("BENCH_N40", "0,1,2,4,8,16,32")
N_BIG = _ints("BENCH_N_BIG", "600")
BIG_LAYERS = int(os.environ.get("BENCH_BIG_LAYERS", "4"))
N16 = _ints("BENCH_N16", "0,1,2,4,8")
ROUNDS = max(5, int(os.environ.get("BENCH_ROUNDS", "7")))
SOURCES = int(os.environ.get("BENCH_SOURCES", "8"))
TARGET_S = float(os.environ.get("BENCH_TARGET_MS", "20")) / 1e3
DECODE = os.environ.get("BENCH_DECODE", "1") != "0"
DECODE_SLOTS_PER_LAYER = int(os.environ.get("BENCH_DECODE_SLOTS_PER_LAYER", "48"))
N_DECODE = _ints("BENCH_N_DECODE", "0,1,2,4,8,32")
BANKS_GIB = float(os.environ["BENCH_BANKS_GIB"]) if os.environ.get("BENCH_BANKS_GIB") else None

SLOTS = 640
EXPERTS = MODEL["experts"]
VARIANTS = ("upstream", "upstream_aa", "ours", "copy_engine")  # bench.json's keys, in round order
CASES = [(40, n) for n in N40] + [(BIG_LAYERS, n) for n in N_BIG] + [(16, n) for n in N16]
DECODE_CASES = [(40, n) for n in N_DECODE]


def _f(x, digits: int = 2) -> str:
    return "n/a" if x is None else f"{x:.{digits}f}"


def log(msg: str) -> None:
    print(f"[bench] {msg}", file=sys.stderr, flush=True)


class Ctx:
    """Everything the benchmarks share: kernels, banks, slot cache, ceiling, collected rows."""

    def __init__(self):
        import torch

        self.torch = torch
        self.device = torch.device("cuda", torch.cuda.current_device())
        self.dgm, self.fic = load_kernels()
        self.ring = default_ring(self.dgm)
        errors = precompile(self.dgm, self.fic, [self.ring], progress=log)
        assert not errors, errors
        t0 = time.perf_counter()
        self.banks = HostBanks(SOURCES, EXPERTS, NVFP4_ROW_BYTES, self.device, seed=1)
        log(
            f"{SOURCES} pinned source layers ({self.banks.total_bytes / 1e9:.2f} GB, {self.banks.buf.describe()['method']}) "
            f"in {time.perf_counter() - t0:.1f}s"
        )
        self.cache = SlotCache(SLOTS, NVFP4_ROW_BYTES, self.device)
        self.misses = MissList(SLOTS, "int32", self.device)
        self.ceiling = {"start": copy_engine_ceiling(256 << 20, device=self.device)}
        assert self.ceiling["start"]["verified"], "copy-engine ceiling copy was not exact"
        log(f"copy-engine ceiling (256 MiB H2D): {self.ceiling['start']['gbps']:.2f} GB/s")
        self.rows: list[dict[str, Any]] = []
        self.decode: dict[str, Any] | None = None
        self.model_banks: tuple[ModelBanks, Any] | None = None
        self.verified_sets = 0
        self.verified_bytes = 0
        self.started = results.now_iso()

    @property
    def ceiling_gbps(self) -> float:
        return self.ceiling["start"]["gbps"]

    def write(self) -> None:
        info = machine_info()
        info = {**info, **{k: v for k, v in self.ceiling["start"].items() if k.startswith("pcie_")}}
        fields = {
            "started_at": self.started,
            "kernel": {
                "decode_gather_default_ring": self.ring._asdict(),
                "upstream": {"num_threads": UPSTREAM_THREADS, "blocks_per_bank": UPSTREAM_BLOCKS_PER_BANK},
            },
            "geometry": {
                "model": MODEL,
                "banks": [
                    {"name": b.name, "shape": list(b.shape), "dtype": b.dtype, "row_bytes": b.row_bytes}
                    for b in nvfp4_banks()
                ],
                "bytes_per_expert": NVFP4_EXPERT_BYTES,
                "slots": SLOTS,
                "source_layers": SOURCES,
                "pinned": self.banks.buf.describe(),
            },
            "ceiling": {k: {kk: vv for kk, vv in v.items() if kk != "seconds"} for k, v in self.ceiling.items()},
            "method": {
                "rounds": ROUNDS,
                "target_ms_per_timed_set": TARGET_S * 1e3,
                "timer": "replay regime: CUDA events around `reps` graph replays from an idle GPU, value = device time "
                "/ reps / layers; decode regime: each replay timed alone after a new miss list, median per set",
                "pairing": "alternating order: even rounds upstream, upstream_aa, ours, copy_engine; odd rounds reversed",
                "speedup": "median(upstream) / median(ours); > 1 means ours is faster",
                "tie": "|speedup - 1| <= A/A spread = max over rounds |upstream/upstream_aa - 1|",
            },
            "gather": sorted(self.rows, key=lambda r: (r["regime"] != "decode", r["layers"] != 40, r["layers"], r["n"])),
            "decode_step": self.decode,
            "verified": {"timed_sets": self.verified_sets, "bytes": self.verified_bytes},
        }
        log(f"wrote {results.save('bench', machine=info, **fields)}")


@pytest.fixture(scope="module")
def ctx():
    c = Ctx()
    yield c
    c.ceiling["end"] = copy_engine_ceiling(256 << 20, device=c.device)
    log(f"copy-engine ceiling at the end: {c.ceiling['end']['gbps']:.2f} GB/s")
    c.write()
    c.banks.close()
    if c.model_banks is not None:
        c.model_banks[0].close()


def measure_gather(ctx: Ctx, layers: int, n: int) -> dict[str, Any]:
    """Every variant of one case in paired alternating rounds (see the module docstring); the row of bench.json."""
    torch = ctx.torch
    banks, cache, misses = ctx.banks, ctx.cache, ctx.misses
    rng = random.Random(f"bench-{layers}-{n}")
    dst, src = random_misses(rng, SLOTS, n, SLOTS, EXPERTS)
    misses.set(dst, src, n)
    last = (layers - 1) % SOURCES
    writes = [(dst[:n], src[:n], banks.dev[last])]  # every layer writes the same slots: the last one wins

    def upstream(layer: int) -> None:
        call_upstream(ctx.fic, cache, banks.src_ptrs[layer % SOURCES], misses.dst, misses.src, misses.num)

    def ours(layer: int) -> None:
        call_ours(ctx.dgm, cache, banks.src_ptrs[layer % SOURCES], misses.dst, misses.src, misses.num)

    for fn in (upstream, ours):  # eager warm-up; decode_gather checks every source descriptor here
        for layer in range(layers):
            fn(layer)
    torch.cuda.synchronize()
    graphs = {}
    for name, fn in (("upstream", upstream), ("upstream_aa", upstream), ("ours", ours)):
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for layer in range(layers):
                fn(layer)
        graphs[name] = g
    if n > 0:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            stream = torch.cuda.current_stream().cuda_stream
            for layer in range(layers):
                host = banks.host[layer % SOURCES]
                for i in range(n):
                    for b, row in enumerate(banks.row_bytes):
                        memcpy_h2d_async(cache.dst[b][dst[i]].data_ptr(), host[b][src[i]].data_ptr(), row, stream)
        graphs["copy_engine"] = g

    poison_rng = random.Random(f"poison-{layers}-{n}")
    verified = {"sets": 0}

    def poison() -> int:
        p = poison_value(verified["sets"], poison_rng)
        cache.poison(p)
        return p

    def verify(name: str, p: int) -> None:
        err = check_slot_cache(cache, p, writes)
        assert err is None, f"{name} L{layers} n={n}: {err}"
        verified["sets"] += 1

    # warm replays, each verified, and the replay-time estimate that sizes a timed set
    for name, g in graphs.items():
        p = poison()
        g.replay()
        verify(name, p)
    est = time_replays(graphs["upstream"].replay, 1)
    reps = reps_for(TARGET_S, est, 3, 400)
    def timed(name: str):
        def set_us(_round: int) -> float:
            p = poison()
            seconds = time_replays(graphs[name].replay, reps)
            verify(name, p)
            return seconds / reps / layers * 1e6

        return set_us

    rounds_us = run_rounds({v: timed(v) for v in VARIANTS if v in graphs}, ROUNDS, base="upstream",
                           aa="upstream_aa").values  # fmt: skip
    graphs.clear()

    return gather_row(ctx, "replay", layers, n, rounds_us, reps, verified["sets"],
                      timing_mode="paired alternating rounds, CUDA events around reps replays (every variant alike)")


def gather_row(ctx: Ctx, regime: str, layers: int, n: int, rounds_us: dict[str, list[float]], reps: int,
               verified_sets: int, **extra: Any) -> dict[str, Any]:
    """bench.json's row of one case (medians, the speedup and A/A statistics, GB/s and the share of the
    copy-engine ceiling), counted into the run's verification totals and logged."""
    summary = summarize_rounds(rounds_us)
    med = summary["median_us"]
    bytes_per_layer = n * NVFP4_EXPERT_BYTES
    gbps = {k: (bytes_per_layer / (v * 1e-6) / 1e9 if v and bytes_per_layer else None) for k, v in med.items()}
    row = {
        "regime": regime,
        "layers": layers,
        "n": n,
        "bytes_per_layer": bytes_per_layer,
        "reps": reps,
        "rounds": ROUNDS,
        "us": med,
        "rounds_us": rounds_us,
        **{k: summary[k] for k in ("speedup", "speedup_paired", "aa_ratio", "aa_ratios", "aa_spread", "verdict")},
        "gbps": gbps,
        "pct_of_ceiling": {k: (100.0 * v / ctx.ceiling_gbps if v else None) for k, v in gbps.items()},
        "ceiling_gbps": ctx.ceiling_gbps,
        "verified_sets": verified_sets,
        **extra,
    }
    ctx.rows.append(row)
    ctx.verified_sets += verified_sets
    ctx.verified_bytes += verified_sets * layers * bytes_per_layer
    log(
        f"{regime} L{layers} n={n}: upstream {_f(med.get('upstream'))} us, ours {_f(med.get('ours'))} us, "
        f"speedup {_f(summary['speedup'], 3)} (A/A spread {_f(summary['aa_spread'], 3)}: {summary['verdict']}), "
        f"copy engine {_f(med.get('copy_engine'))} us, {verified_sets} sets verified"
    )
    return row


def measure_decode_regime(ctx: Ctx, layers: int, n: int) -> dict[str, Any]:
    """upstream, upstream_aa and ours in the decode regime (module docstring); the row of bench.json."""
    if ctx.model_banks is None:
        t0 = time.perf_counter()
        fp = Footprint.scaled(BANKS_GIB)
        banks = ModelBanks(fp, ctx.device, progress=log)
        ctx.model_banks = (banks, poisoned_slots(fp.row_bytes, ctx.device))
        log(f"decode-regime banks: {fp.describe()} in {time.perf_counter() - t0:.0f}s")
    banks, slots = ctx.model_banks
    rg = RegimeGraphs(banks, slots, n, layers=layers)

    upstream, ours = functools.partial(call_upstream, ctx.fic), functools.partial(call_ours, ctx.dgm)
    for name, fn in (("upstream", upstream), ("upstream_aa", upstream), ("ours", ours)):
        rg.capture(name, fn)
    reps = replays_per_set(n)
    rounds_us = rg.rounds(["upstream", "upstream_aa", "ours"], "decode", ROUNDS, reps).values
    return gather_row(ctx, "decode", rg.layers, n, rounds_us, reps, rg.verified, footprint=banks.fp.describe(),
                      timing_mode="a new miss list before every replay; each replay timed alone between CUDA events "
                      "and verified; median per set, paired alternating rounds")  # fmt: skip


@pytest.mark.parametrize("layers,n", DECODE_CASES, ids=[f"decode-L{layers}-n{n}" for layers, n in DECODE_CASES])
def test_gather_decode(ctx, layers, n):
    row = measure_decode_regime(ctx, layers, n)
    # n = 0 copies nothing to compare; every set still checked that no slot was written (check_clean)
    assert row["verified_sets"] >= (ROUNDS * 3 if n else 0), row["verified_sets"]


@pytest.mark.parametrize("layers,n", CASES, ids=[f"replay-L{layers}-n{n}" for layers, n in CASES])
def test_gather_graph(ctx, layers, n):
    row = measure_gather(ctx, layers, n)
    assert row["verified_sets"] >= ROUNDS * len(row["rounds_us"]), row["verified_sets"]


def measure_decode(ctx: Ctx) -> dict[str, Any]:
    """The captured decode step of unset, unset A/A and tma caches in paired alternating blocks."""
    per_block = 10
    config = StepConfig(slots_per_layer=DECODE_SLOTS_PER_LAYER, source_layers=SOURCES, steps=ROUNDS * per_block)
    step = DecodeStep(DEFAULT_VARIANTS, config, device=ctx.device, banks=ctx.banks, log=log)
    assert getattr(step.caches["tma"], "_decode_gather", None) is not None, "the tma cache does not use decode_gather"
    names = [v.name for v in DEFAULT_VARIANTS]

    def states_agree(r: int) -> None:
        for other in names[1:]:
            err = step.state_diff(names[0], other)
            assert err is None, f"block {r}: {err}"

    # even rounds: unset, unset_aa, tma; odd rounds reversed; the caches compared after every round
    rounds_us = run_rounds(
        {name: (lambda r, name=name: step.time_block(name, r * per_block, per_block)) for name in names},
        ROUNDS, base="unset", aa="unset_aa", after_round=states_agree,
    ).values  # fmt: skip
    stats = step.miss_stats()
    assert stats["unset"] == stats["tma"] == stats["unset_aa"], stats
    err = step.reference_diff("tma")
    assert err is None, f"decode step: {err}"
    step.close()
    summary = summarize_rounds(rounds_us, ours="tma", base="unset", aa="unset_aa")
    med = summary["median_us"]
    layers = config.layers
    misses_per_step = stats["tma"]["missing_per_layer"] * layers
    bytes_per_step = misses_per_step * NVFP4_EXPERT_BYTES
    decode = {
        "layers": layers,
        "experts": config.experts,
        "top_k": config.top_k,
        "batch": config.batch,
        "cache_slots": config.cache_slots,
        "zipf_exponent": step.zipf_exponent,
        "modelled_miss_rate": step.modelled_miss_rate,
        "miss_rate": stats["tma"]["miss_rate"],
        "misses_per_step": misses_per_step,
        "bytes_per_step": bytes_per_step,
        "steps_per_round": per_block,
        "rounds": ROUNDS,
        "us_per_step": med,
        "rounds_us": rounds_us,
        "speedup": summary["speedup"],
        "speedup_paired": summary["speedup_paired"],
        "aa_ratio": summary["aa_ratio"],
        "aa_spread": summary["aa_spread"],
        "verdict": summary["verdict"],
        "ideal_copy_us_per_step": bytes_per_step / (ctx.ceiling_gbps * 1e9) * 1e6,
        "note": "step = one decode step's ensure_experts + copy_missing for every layer, in one captured graph; "
        "includes the per-step device copy of the routed ids into the graph's static buffer",
        "timing_mode": "paired alternating blocks, CUDA events around each block (every cache alike)",
    }
    log(
        f"decode step: unset {_f(med['unset'], 1)} us, tma {_f(med['tma'], 1)} us per step (speedup "
        f"{_f(summary['speedup'], 3)}, A/A spread {_f(summary['aa_spread'], 3)}: {summary['verdict']}), miss rate "
        f"{stats['tma']['miss_rate']:.3f}, {misses_per_step:.2f} misses per step"
    )
    return decode


@pytest.mark.skipif(not DECODE, reason="BENCH_DECODE=0")
def test_decode_step_offload_cache(ctx):
    ctx.decode = measure_decode(ctx)
    assert len(ctx.decode["rounds_us"]["tma"]) == ROUNDS
