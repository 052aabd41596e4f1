"""Where a captured decode step's time goes, and the PDL builds the decode-step A/B can add.

On the real ``OffloadMoeCache`` (``gpukit.decode_step``): ``upstream``, ``upstream_aa`` (the A/A control),
``tma``; ``tma_pdl``, the series' kernel with ``griddepcontrol.wait`` after its descriptor loads and
``launch_dependents`` right after, launched with programmatic stream serialization; ``upstream_pdl``, upstream's
with ``griddepcontrol.wait`` first, launched with PDL. The PDL builds are textual edits of the installed
headers (not copied here): measurement probes, not proposals.

The decode step's A/B is the benchmark's (``BENCH_STEP_PDL=1`` adds :func:`pdl_kernels` to
``bench/test_bench_gather.py::test_decode_step``). Here: a torch.profiler breakdown of replayed steps per
kernel (per layer: the ensure kernel, the gap, the copy kernel), and the per-layer copy alone (40 layers
per graph, paired rounds, every timed set byte-verified). ``python -m bench.step_pdl`` on a CUDA machine.
"""

from __future__ import annotations

import functools
import logging
import statistics
import time

import torch

from gpukit.decode_step import (DEFAULT_KERNELS, DecodeStep, StepConfig, StepKernel, copy_all_layers, expected_slots,
                                gather_env, stage_misses, kernel_modules)  # fmt: skip
from suite.geometry import MODEL, nvfp4_banks
from gpukit.launch import probe_headers
from gpukit.memory import cache_rows
from suite.models import StepBreakdown, StepPdl, paired
from suite.rounds import run_rounds
from gpukit.timing import bench
from bench import entry
from suite.kernels import TMA_KERNEL, UPSTREAM_KERNEL, Kernel

POISON = 0x5A


log = logging.getLogger("bench.step_pdl").info  # the messages (named: the module runs as __main__); main() sets their format


def _probe_module(header: str, name: str, edits: list[tuple[str, str]], template: str, args):
    """JIT-build ``header`` (an installed JIT header) with ``edits`` applied, as module ``name``."""
    from freetoken.kernel.utils import KERNEL_PATH, load_jit

    text = (KERNEL_PATH / "jit" / header).read_text()
    for old, new in edits:
        assert text.count(old) >= 1, f"{header} changed: {old!r} not found; update the probe"
        text = text.replace(old, new)
    probe = f"{name}.cuh"
    with probe_headers({probe: text}):  # beside the original while it builds, removed after
        return load_jit(name, *args, cuda_files=[probe], cuda_wrappers=[("launch", f"&{template}<{args}>::run")])


def pdl_probes():
    """(decode_gather + PDL, fast_index_copy_multi + PDL) modules for the default ring and grid."""
    from freetoken.kernel import decode_gather
    from freetoken.kernel import fast_index_copy
    from freetoken.kernel.utils import make_cpp_args

    ours = _probe_module(
        "decode_gather.cuh", "decode_gather_pdl_probe",
        [("    const auto* dst_indices = static_cast<const IdType*>(p.dst_indices);\n",
          "    device::PDL::wait<true>();\n    device::PDL::launch<true>();\n"
          "    const auto* dst_indices = static_cast<const IdType*>(p.dst_indices);\n"),
         ("dev, kRingBytes)(kernel<", "dev, kRingBytes).with_attr(true)(kernel<")],
        "DecodeGatherKernel", make_cpp_args(*decode_gather.default_ring()),
    )  # fmt: skip
    upstream = _probe_module(
        "fast_index_copy.cuh", f"{UPSTREAM_KERNEL}_pdl_probe",
        [("const __grid_constant__ MultiIndexCopyParams p\n) {\n",
          "const __grid_constant__ MultiIndexCopyParams p\n) {\n    device::PDL::wait<true>();\n"),
         ("device.unwrap())(kernel, params);", "device.unwrap()).with_attr(true)(kernel, params);")],
        "MultiIndexCopyKernel", make_cpp_args(1024, fast_index_copy.default_blocks_per_bank(torch.device("cuda"))),
    )  # fmt: skip
    return ours, upstream


def pdl_kernels(probes=None) -> list[StepKernel]:
    """``tma_pdl`` and ``upstream_pdl`` as decode-step kernels (``probes``: :func:`pdl_probes`' modules)."""
    ours_pdl, upstream_pdl = probes or pdl_probes()
    return [StepKernel("tma_pdl", Kernel.TMA.env, module=ours_pdl),
            StepKernel("upstream_pdl", upstream_module=upstream_pdl)]  # fmt: skip


def step_kernels(probes) -> list[StepKernel]:
    return [*DEFAULT_KERNELS, *pdl_kernels(probes)]


def profile_block(step: DecodeStep, name: str, start: int, count: int) -> dict:
    """``count`` replayed steps under torch.profiler: per layer call, the ensure span, gap and copy (µs)."""
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for k in range(count):
            step.replay(name, start + k)
        torch.cuda.synchronize()
    kernels = sorted(
        (e.time_range.start, e.time_range.end, e.name)
        for e in prof.events()
        if e.device_type.name == "CUDA" and e.time_range.end > e.time_range.start
    )
    calls, ensure = [], []
    for start_us, end_us, kname in kernels:
        if TMA_KERNEL in kname or UPSTREAM_KERNEL in kname:
            if ensure:
                e0, e1 = ensure[0][0], max(e for _, e, _ in ensure)
                calls.append({"ensure_us": e1 - e0, "gap_us": start_us - e1, "copy_us": end_us - start_us})
            ensure = []
        elif "memcpy" not in kname.lower() and "memset" not in kname.lower():
            ensure.append((start_us, end_us, kname))
    if not calls:
        return {"calls": 0, "kernel_names": sorted({k for _, _, k in kernels})}
    mean = {k: statistics.fmean(c[k] for c in calls) for k in ("ensure_us", "gap_us", "copy_us")}
    median = {k: statistics.median(c[k] for c in calls) for k in ("ensure_us", "gap_us", "copy_us")}
    return {"calls": len(calls), "steps": count, "mean_us": mean, "median_us": median,
            "per_step_us": {k: v * len(calls) / count for k, v in mean.items()},
            "kernel_names": sorted({k for _, _, k in kernels})}  # fmt: skip


def breakdown(args, probes) -> dict:
    """The torch.profiler breakdown of ``--profile-steps`` replayed steps per kernel (no A/B here: the
    benchmark's test_decode_step times them); every cache must end with the same state."""
    vs = step_kernels(probes)
    cfg = StepConfig(steps=args.profile_steps)
    step = DecodeStep(vs, cfg, log=log)
    names = [v.name for v in vs]
    out = {"breakdown": {n: profile_block(step, n, 0, args.profile_steps) for n in names}}
    for name in names:
        diff = step.state_diff(names[0], name) or step.reference_diff(name)
        assert diff is None, f"{name}: {diff}"
    stats = step.miss_stats()
    out |= {"zipf_exponent": step.zipf_exponent, "modelled_miss_rate": step.modelled_miss_rate,
            "cache_slots": cfg.cache_slots, "misses_per_step": stats[Kernel.TMA]["missing_per_layer"] * cfg.layers,
            "miss_stats": stats[Kernel.TMA]}  # fmt: skip
    step.close()
    return out


def per_layer(args, probes) -> dict:
    """copy_missing alone, 40 layers per graph, a staged miss list of n experts, every set verified."""
    from freetoken.moe.offload_cache import OffloadMoeCache

    from gpukit.memory import HostBanks

    layers, experts = MODEL["moe_layers"], MODEL["experts"]
    geoms = nvfp4_banks()
    banks = HostBanks(args.sources, experts, [g.row_bytes for g in geoms], torch.device("cuda"), seed=1)
    typed = [banks.typed(layer % args.sources, geoms) for layer in range(layers)]
    sources = {g.name: [typed[layer][g.name] for layer in range(layers)] for g in geoms}
    vs = step_kernels(probes)
    caches = {}
    for v in vs:
        with gather_env(v.env):
            caches[v.name] = OffloadMoeCache(num_layers=layers, num_experts=experts, cache_size=experts,
                                             device=torch.device("cuda"), quant_format="nvfp4")  # fmt: skip
        caches[v.name].set_bank_sources(sources)
    gen = torch.Generator(device="cuda").manual_seed(7)
    last = (layers - 1) % args.sources
    out = {}
    for n in args.ns:
        dst = torch.randperm(experts, device="cuda", generator=gen)[:n].to(torch.int32)
        src = torch.randperm(experts, device="cuda", generator=gen)[:n].to(torch.int32)
        expected = expected_slots(banks.dev[last], experts, dst, src, POISON)
        graphs = {}
        for v in vs:
            c = caches[v.name]
            stage_misses(c, dst, src)
            with kernel_modules(v):
                copy_all_layers(c, layers)  # eager first: JIT builds outside capture
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    copy_all_layers(c, layers)
            graphs[v.name] = g

        def timed_set(name: str, r: int) -> float:
            """µs per layer of ``args.reps`` replays into a poisoned cache, verified after."""
            c = caches[name]
            for g in geoms:
                cache_rows(c, g.name).fill_(POISON)
            us = bench(graphs[name].replay, reps=args.reps)[0] / args.reps / layers * 1e6
            for g, e in zip(geoms, expected):
                assert torch.equal(cache_rows(c, g.name), e), f"n={n} {name} round {r}: bank {g.name} wrong"
            return us

        timed = {v.name: functools.partial(timed_set, v.name) for v in vs}
        rounds = run_rounds(timed, args.rounds, base="upstream", aa="upstream_aa")
        out[str(n)] = paired(rounds, verified_sets=args.rounds * len(vs))
        log(f"per layer n={n}: " + ", ".join(f"{k} {v:.2f} us" for k, v in out[str(n)].median_us.items()))
        graphs.clear()
    banks.close()
    return out


def main(argv: list[str] | None = None) -> int:
    p = entry.parser("step_pdl")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--profile-steps", type=int, default=10)
    p.add_argument("--sources", type=int, default=8)
    p.add_argument("--ns", type=int, nargs="*", default=[0, 1, 2, 4])
    p.add_argument("--reps", type=int, default=20, help="graph replays per timed per-layer set")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    probes = pdl_probes()
    log(f"PDL probes built in {time.perf_counter() - t0:.0f}s")
    s = breakdown(args, probes)
    for name, b in s["breakdown"].items():
        if b.get("calls"):
            log(f"  {name}: per layer call ensure {b['mean_us']['ensure_us']:.2f} us, gap {b['mean_us']['gap_us']:.2f} us, "
                f"copy {b['mean_us']['copy_us']:.2f} us ({b['calls']} calls)")
    doc = StepPdl(args=vars(args), decode_step=StepBreakdown.from_doc(s), per_layer=per_layer(args, probes))
    entry.save("step_pdl", args, doc)
    log(f"done in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
