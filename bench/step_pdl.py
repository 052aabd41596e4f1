"""Where a captured decode step's time goes, and what programmatic dependent launch buys.

Two measurements on the real ``OffloadMoeCache`` (Qwen3.6-35B-A3B NVFP4, 40 layers, 256 experts,
top-8, Zipf routing calibrated to a ~10% LRU miss rate), over the same pinned banks:

* the decode step (``ensure_experts`` + ``copy_missing`` for every layer, one captured graph per
  cache), paired alternating rounds of 10 steps for ``unset``, ``unset_aa`` (a second unset
  cache: the A/A control), ``tma_nopdl``, ``tma`` (PDL, the series' default) and ``upstream_pdl``
  (fast_index_copy_multi rebuilt with ``griddepcontrol.wait`` at its start and launched with
  PDL: what the same change would give upstream's kernel); after every round all caches must
  hold the same slot map and bytes, and at the end every resident slot its source rows;
* a breakdown of one replayed step per variant with torch.profiler: per layer the ensure
  kernels' span, the gap to the copy kernel and the copy kernel's duration;
* the per-layer copy (``copy_missing`` only, a staged miss list of n experts, 40 layers per
  graph) for the same five variants at n = 0, 1, 2, 4, every timed set byte-verified.

Run on a CUDA machine with the patched freetoken installed: ``python -m bench.step_pdl --out DIR``.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from bench import common as C

PROBE_HEADER = "fast_index_copy_pdl_probe.cuh"
VARIANTS = ("unset", "unset_aa", "tma_nopdl", "tma", "upstream_pdl")


def log(msg: str) -> None:
    print(f"[step_pdl] {msg}", file=sys.stderr, flush=True)


def upstream_pdl_launcher():
    """fast_index_copy_multi_jit's module rebuilt with PDL: wait first, launch with the attribute.

    The variant is derived from the installed header by two textual edits (the header itself is
    upstream's, not copied here); it is a measurement probe, not a proposal.
    """
    from freetoken.kernel import fast_index_copy as fic
    from freetoken.kernel.utils import KERNEL_PATH, load_jit, make_cpp_args

    text = (KERNEL_PATH / "jit" / "fast_index_copy.cuh").read_text()
    body_open = "const __grid_constant__ MultiIndexCopyParams p\n) {\n"
    launch = "args.device)(kernel, args.params);"
    assert text.count(body_open) == 1 and text.count(launch) == 1, "fast_index_copy.cuh changed: update the probe"
    text = text.replace(body_open, body_open + "    device::PDL::wait<true>();\n")
    text = text.replace(launch, "args.device).with_attr(true)(kernel, args.params);")
    (KERNEL_PATH / "jit" / PROBE_HEADER).write_text(text)
    bpb = fic.default_blocks_per_bank(torch.device("cuda"))
    args = make_cpp_args(1024, bpb)
    module = load_jit(
        "fast_index_copy_multi_pdl_probe",
        *args,
        cuda_files=[PROBE_HEADER],
        cuda_wrappers=[("launch", f"&MultiIndexCopyKernel<{args}>::run")],
    )

    def launch_fn(dst_ptrs, src_ptrs, feat_bytes, dst_indices, src_indices, num_indices=None, *, wait_flag=0, **_):
        module.launch(dst_ptrs, src_ptrs, feat_bytes, dst_indices, src_indices, num_indices, int(wait_flag or 0))

    return launch_fn


@contextlib.contextmanager
def upstream_pdl_during(name: str, launcher):
    """While capturing ``upstream_pdl``'s graphs, copy_missing's fast_index_copy_multi_jit is the PDL build."""
    from freetoken.kernel import fast_index_copy as fic

    if name != "upstream_pdl":
        yield
        return
    real = fic.fast_index_copy_multi_jit
    fic.fast_index_copy_multi_jit = launcher
    try:
        yield
    finally:
        fic.fast_index_copy_multi_jit = real


def build_caches(layers, experts, cache_size, sources, monkey_env):
    from freetoken.kernel import decode_gather
    from freetoken.moe.offload_cache import OffloadMoeCache

    caches = {}
    for name in VARIANTS:
        monkey_env("tma" if name.startswith("tma") else "")
        c = OffloadMoeCache(num_layers=layers, num_experts=experts, cache_size=cache_size,
                            device=torch.device("cuda"), quant_format="nvfp4")
        c.set_bank_sources(sources)
        if name == "tma_nopdl":
            c._decode_gather = functools.partial(decode_gather.decode_gather_jit, use_pdl=False)
        assert (c._decode_gather is not None) == name.startswith("tma"), name
        caches[name] = c
    monkey_env("")
    return caches


def summarize(rounds: dict[str, list[float]]) -> dict:
    med = {k: statistics.median(v) for k, v in rounds.items()}
    aa = [b / a for b, a in zip(rounds["unset"], rounds["unset_aa"])]
    spread = max(abs(r - 1) for r in aa)
    out = {"median_us": med, "rounds_us": rounds, "aa_ratios": aa, "aa_spread": spread, "ratio": {}, "verdict": {}}
    for k in rounds:
        if k in ("unset", "unset_aa"):
            continue
        r = med["unset"] / med[k]
        out["ratio"][k] = r
        out["verdict"][k] = "tie" if abs(r - 1) <= spread else ("faster" if r > 1 else "slower")
    return out


def profile_step(graph, prepare, copy_names=("decode_gather", "fast_index_copy_multi")) -> dict:
    """One replay under torch.profiler: per layer the ensure span, the gap and the copy kernel (us)."""
    from torch.profiler import ProfilerActivity, profile

    prepare()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        graph.replay()
        torch.cuda.synchronize()
    kernels = sorted(
        ((e.time_range.start, e.time_range.end, e.name) for e in prof.events() if e.device_type.name == "CUDA"
         and e.time_range.end > e.time_range.start),
    )
    layers, current = [], []
    for start, end, name in kernels:
        if any(c in name for c in copy_names):
            ensure_start = current[0][0] if current else start
            ensure_end = max((e for _, e, _ in current), default=start)
            layers.append({"ensure_us": ensure_end - ensure_start, "gap_us": start - ensure_end,
                           "copy_us": end - start, "ensure_kernels": len(current)})
            current = []
        else:
            current.append((start, end, name))
    names = sorted({n for _, _, n in kernels})
    step_us = kernels[-1][1] - kernels[0][0] if kernels else None
    return {"layers": layers, "kernel_names": names, "step_us": step_us,
            "sum": {k: sum(row[k] for row in layers) for k in ("ensure_us", "gap_us", "copy_us")}}


def decode_step(args, banks, launcher, monkey_env) -> dict:
    layers, experts, top_k = C.MODEL["moe_layers"], C.MODEL["experts"], C.MODEL["top_k"]
    cache_size = max(experts, args.slots_per_layer * layers)
    warm, per_block = 40, 10
    exponent, model_rate = C.calibrate_zipf(0.10, steps=150, layers=layers, experts=experts, top_k=top_k,
                                            cache_size=cache_size, warm_steps=50, seed=3)
    steps = warm + args.rounds * per_block
    trace = C.zipf_routing_trace(steps, layers, experts, top_k, exponent, batch=1, seed=4).cuda()
    geoms = C.nvfp4_banks()
    typed = [banks.typed(layer % args.sources, geoms) for layer in range(layers)]
    sources = {g.name: [typed[layer][g.name] for layer in range(layers)] for g in geoms}
    caches = build_caches(layers, experts, cache_size, sources, monkey_env)
    static = {n: torch.empty((layers, 1, top_k), dtype=torch.int32, device="cuda") for n in caches}

    def step_calls(name):
        for layer in range(layers):
            caches[name].ensure_experts(layer, static[name][layer])
            caches[name].copy_missing()

    for t in range(warm):
        for name in caches:
            static[name].copy_(trace[t])
            with upstream_pdl_during(name, launcher):
                step_calls(name)
    torch.cuda.synchronize()
    for c in caches.values():
        c.reset_stats()
    graphs = {}
    for name in caches:
        g = torch.cuda.CUDAGraph()
        with upstream_pdl_during(name, launcher), torch.cuda.graph(g):
            step_calls(name)
        graphs[name] = g

    def block(name, r):
        for k in range(per_block):
            static[name].copy_(trace[warm + r * per_block + k])
            graphs[name].replay()

    rounds = {n: [] for n in caches}
    for r in range(args.rounds):
        order = list(caches) if r % 2 == 0 else list(caches)[::-1]
        for name in order:
            rounds[name].append(C.time_replays(lambda: block(name, r), 1) / per_block * 1e6)
        ref = caches["unset"]
        for name, c in caches.items():
            assert torch.equal(ref.slot_for_id, c.slot_for_id), f"round {r}: {name} slot map differs"
            for g in geoms:
                assert torch.equal(C.cache_rows(ref, g.name), C.cache_rows(c, g.name)), f"round {r}: {name} {g.name}"
    stats = {n: c.decode_miss_stats() for n, c in caches.items()}
    for name, c in caches.items():
        err = C.cache_reference_diff(c, lambda layer: banks.dev[layer % args.sources], geoms, experts)
        assert err is None, f"{name}: {err}"
    out = summarize(rounds)
    # breakdown: replay the step once more per variant (the next trace step) under the profiler
    t_next = warm + args.rounds * per_block - 1
    out["breakdown"] = {
        name: profile_step(graphs[name], lambda name=name: static[name].copy_(trace[t_next])) for name in caches
    }
    out |= {"zipf_exponent": exponent, "model_miss_rate": model_rate, "cache_size": cache_size,
            "misses_per_step": stats["tma"]["missing_per_layer"] * layers, "per_block": per_block,
            "rounds": args.rounds, "miss_stats": stats["tma"]}
    graphs.clear()
    return out


def per_layer(args, banks, launcher, monkey_env) -> dict:
    layers, experts = C.MODEL["moe_layers"], C.MODEL["experts"]
    geoms = C.nvfp4_banks()
    typed = [banks.typed(layer % args.sources, geoms) for layer in range(layers)]
    sources = {g.name: [typed[layer][g.name] for layer in range(layers)] for g in geoms}
    caches = build_caches(layers, experts, experts, sources, monkey_env)
    gen = torch.Generator(device="cuda").manual_seed(7)
    out = {}
    for n in args.ns:
        dst = torch.randperm(experts, device="cuda", generator=gen)[:n].to(torch.int32)
        src = torch.randperm(experts, device="cuda", generator=gen)[:n].to(torch.int32)
        last = (layers - 1) % args.sources
        graphs = {}
        for name, c in caches.items():
            c.evict_slots[:n].copy_(dst), c.src_indices[:n].copy_(src), c.num_indices.fill_(n)

            def calls(c=c):
                for layer in range(layers):
                    c._pending_src_layer, c._pending_whole_layer = layer, False
                    c.copy_missing()

            with upstream_pdl_during(name, launcher):
                calls()
                g = torch.cuda.CUDAGraph()
                with torch.cuda.graph(g):
                    calls()
            graphs[name] = g
        rounds = {name: [] for name in caches}
        wrong = 0
        for r in range(args.rounds):
            for name in caches if r % 2 == 0 else list(caches)[::-1]:
                c = caches[name]
                for g in geoms:
                    C.cache_rows(c, g.name).fill_(0x5A)
                rounds[name].append(C.time_replays(graphs[name].replay, args.reps) / args.reps / layers * 1e6)
                for k, g in enumerate(geoms):
                    rows = C.cache_rows(c, g.name)
                    exp = torch.full_like(rows, 0x5A)
                    exp[dst.long()] = banks.dev[last][k][src.long()]
                    wrong += not torch.equal(rows, exp)
        assert wrong == 0, f"n={n}: {wrong} wrong sets"
        out[str(n)] = summarize(rounds) | {"verified_sets": args.rounds * len(caches)}
        log(f"per layer n={n}: " + ", ".join(f"{k} {v:.2f}" for k, v in out[str(n)]["median_us"].items()))
        del graphs
    return out


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", required=True, help="directory for step_pdl.json")
    p.add_argument("--rounds", type=int, default=9)
    p.add_argument("--sources", type=int, default=8)
    p.add_argument("--slots-per-layer", type=int, default=48)
    p.add_argument("--ns", type=int, nargs="*", default=[0, 1, 2, 4])
    p.add_argument("--reps", type=int, default=20, help="graph replays per timed per-layer set")
    p.add_argument("--skip-step", action="store_true")
    args = p.parse_args()
    import os

    def monkey_env(value: str) -> None:
        os.environ["FREETOKEN_DECODE_GATHER"] = value

    t0 = time.perf_counter()
    banks = C.HostBanks(args.sources, C.MODEL["experts"], C.NVFP4_ROW_BYTES, torch.device("cuda"), seed=1)
    log(f"pinned {banks.total_bytes / 1e9:.1f} GB in {time.perf_counter() - t0:.0f}s; building the PDL probe")
    launcher = upstream_pdl_launcher()
    doc = {"schema": "freetoken-decode-gather-step-pdl/1", "machine": C.machine_info(), "variants": list(VARIANTS)}
    if not args.skip_step:
        doc["decode_step"] = decode_step(args, banks, launcher, monkey_env)
        s = doc["decode_step"]
        log("decode step: " + ", ".join(f"{k} {v:.1f} us" for k, v in s["median_us"].items())
            + f"; A/A ±{s['aa_spread']:.4f}; ratios " + ", ".join(f"{k} {v:.4f}" for k, v in s["ratio"].items()))
    doc["per_layer"] = per_layer(args, banks, launcher, monkey_env)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "step_pdl.json").write_text(json.dumps(doc, indent=1, default=str))
    log(f"wrote {out / 'step_pdl.json'} in {time.perf_counter() - t0:.0f}s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
