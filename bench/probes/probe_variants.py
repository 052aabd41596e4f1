"""Prologue/ring probe: decode_gather kernel variants x rings against upstream, same buffers.

Development experiment behind the kernel's prologue (see README.md here); needs a GPU and the
patched freetoken installed (``nox -s apply build``, then this file with that session's Python):

    PROBE_VARS=current,old PROBE_RINGS=16x4x8K PROBE_NS=0,1,2,600 \
        .nox/build/bin/python bench/probes/probe_variants.py

It writes the variants of :mod:`variants` next to the installed decode_gather.cuh, JIT-builds each
(variant, ring) as its own module, and times per-layer 40-layer captured graphs (4 layers for
n > 32) of upstream fast_index_copy_multi (twice: the A/A control) and every module, 7 rounds in
alternating order, every timed set verified byte-exact against a device copy of the sources.
``PROBE_STEP`` ("variant:ring,...") adds the captured decode step of the real OffloadMoeCache
(unset, unset A/A, and those modules). Writes ``$OUT/probe_var.json`` (default /tmp).
"""
import json, os, sys, time, statistics, functools
sys.path.insert(0, os.getcwd())
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from concurrent.futures import ThreadPoolExecutor
import torch
from bench import common as C
import variants
from freetoken.kernel import utils as U
from freetoken.kernel import decode_gather as dgm
from freetoken.kernel import fast_index_copy as fic
from freetoken.moe.offload_cache import OffloadMoeCache

OUT = os.environ.get("OUT", "/tmp")
RINGS = [C.Ring.parse(r) for r in os.environ.get("PROBE_RINGS", "16x4x8K,32x4x4K").split(",")]
VARS = os.environ.get("PROBE_VARS", "current,old,serial_loop,serial_init").split(",")
NS = [int(x) for x in os.environ.get("PROBE_NS", "0,1,2,4,8").split(",")]
dev = torch.device("cuda")
files, skipped = variants.make(U.KERNEL_PATH / "jit", VARS)
for name, why in skipped.items():
    print(f"variant {name} skipped: {why}", flush=True)
VARS = [v for v in VARS if v in files]
med = statistics.median


def load(v, r):
    args = U.make_cpp_args(r.ctas, r.stages, r.chunk_bytes)
    return U.load_jit(f"dg{v}", *args, cuda_files=[files[v]], cuda_wrappers=[("launch", f"&DecodeGatherKernel<{args}>::run")])


t0 = time.time()
jobs = {(v, r): None for v in VARS for r in RINGS}
with ThreadPoolExecutor(12) as ex:
    futs = {k: ex.submit(load, *k) for k in jobs}
    fic._jit_fast_index_copy_multi_module(num_threads=1024, blocks_per_bank=8)
    MODS = {k: f.result() for k, f in futs.items()}
print(f"{len(MODS)} modules in {time.time()-t0:.0f}s", flush=True)

FEAT = C.NVFP4_ROW_BYTES
E, NSRC, SLOTS, LAYERS = 256, 4, 640, 40
gsrc = [[torch.randint(0, 256, (E, f), dtype=torch.uint8, device=dev) for f in FEAT] for _ in range(NSRC)]
hsrc = [[t.cpu().pin_memory() for t in layer] for layer in gsrc]
dst = [torch.empty((SLOTS, f), dtype=torch.uint8, device=dev) for f in FEAT]
dst_ptrs = torch.tensor([t.data_ptr() for t in dst], dtype=torch.int64, device=dev)
src_ptrs = [torch.tensor([t.data_ptr() for t in layer], dtype=torch.int64, device=dev) for layer in hsrc]
feat = torch.tensor(FEAT, dtype=torch.int64, device=dev)
evict = torch.empty(SLOTS, dtype=torch.int32, device=dev)
srci = torch.empty(SLOTS, dtype=torch.int32, device=dev)
num = torch.zeros(1, dtype=torch.int64, device=dev)


def up(l):
    fic.fast_index_copy_multi_jit(dst_ptrs, src_ptrs[l % NSRC], feat, evict, srci, num, num_threads=1024, blocks_per_bank=8)


KS = {"up": up, "upAA": up}
for (v, r), m in MODS.items():
    KS[f"{v}:{r.tag}"] = functools.partial(lambda m, l: m.launch(dst_ptrs, src_ptrs[l % NSRC], feat, evict, srci, num), m)


def set_misses(n):
    g = torch.Generator(device=dev); g.manual_seed(n)
    perm = torch.randperm(SLOTS, device=dev, generator=g)[: max(n, 1)].to(torch.int32)
    evict.zero_(); srci.zero_()
    evict[:n] = perm[:n]
    srci[:n] = torch.randint(0, E, (n,), device=dev, dtype=torch.int32, generator=g)
    num.fill_(n)


def verify(n):
    torch.cuda.synchronize()
    if n == 0:
        return True
    e, s = evict[:n].long(), srci[:n].long()
    last = (4 if n > 32 else LAYERS) - 1
    return all(torch.equal(dst[b][e], gsrc[last % NSRC][b][s]) for b in range(len(FEAT)))


A, verified = {}, 0
for n in NS:
    set_misses(n)
    graphs = {}
    NL = 4 if n > 32 else LAYERS
    for kn, fn in KS.items():
        for l in range(NL):
            fn(l)
        torch.cuda.synchronize()
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            for l in range(NL):
                fn(l)
        graphs[kn] = g
    times = {k: [] for k in graphs}
    reps = 20 if n <= 2 else (10 if n <= 32 else 2)
    for r in range(7):
        order = list(graphs) if r % 2 == 0 else list(graphs)[::-1]
        for key in order:
            g = graphs[key]
            for t in dst:
                t.fill_(0xA5)
            g.replay()
            assert verify(n), (n, key)
            times[key].append(C.time_replays(g.replay, reps) / reps / NL * 1e6)
            verified += 1
    res = {k: med(v) for k, v in times.items()}
    rat = {k: med([a / b for a, b in zip(times["up"], v)]) for k, v in times.items()}
    A[n] = {"us": res, "paired_ratio": rat, "rounds": times}
    print(f"--- n={n} up={res['up']:.2f} AA={rat['upAA']:.4f}", flush=True)
    for r in RINGS:
        print(f"  {r.tag:9s} " + " ".join(f"{v}={res[f'{v}:{r.tag}']:.2f}({rat[f'{v}:{r.tag}']:.4f})" for v in VARS), flush=True)
    del graphs
json.dump({"A": A, "rings": [r.tag for r in RINGS], "vars": VARS, "skipped": skipped, "machine": C.machine_info()},
          open(f"{OUT}/probe_var.json", "w"), indent=1, default=str)

# decode step for chosen (variant, ring) pairs
STEP = [tuple(x.split(":")) for x in os.environ.get("PROBE_STEP", "").split(",") if x]
if STEP:
    banks = C.HostBanks(NSRC, E, C.NVFP4_ROW_BYTES, dev, seed=1)
    geoms = C.nvfp4_banks()
    layers, top_k = 40, 8
    typed = [banks.typed(layer % NSRC, geoms) for layer in range(layers)]
    sources = {g.name: [typed[layer][g.name] for layer in range(layers)] for g in geoms}
    caches, mod_of = {}, {}
    names = ["unset", "unsetAA"] + [f"{v}:{t}" for v, t in STEP]
    for name in names:
        os.environ.pop("FREETOKEN_DECODE_GATHER", None)
        if name in mod_of or ":" in name:
            os.environ["FREETOKEN_DECODE_GATHER"] = "tma"
            v, t = name.split(":")
            mod_of[name] = MODS[(v, C.Ring.parse(t))]
        c = OffloadMoeCache(num_layers=layers, num_experts=E, cache_size=1920, device=dev, quant_format="nvfp4")
        c.set_bank_sources(sources)
        caches[name] = c
    os.environ.pop("FREETOKEN_DECODE_GATHER", None)
    orig = dgm._jit_decode_gather_module
    warm, per_block, rounds = 40, 10, 9
    trace = C.zipf_routing_trace(warm + rounds * per_block, layers, E, top_k, 1.867, batch=1, seed=4).to(dev)
    static = {n: torch.empty((layers, 1, top_k), dtype=torch.int32, device=dev) for n in caches}

    def body(name):
        dgm._jit_decode_gather_module = (lambda **kw: mod_of[name]) if name in mod_of else orig
        c = caches[name]
        for layer in range(layers):
            c.ensure_experts(layer, static[name][layer]); c.copy_missing()

    for t in range(warm):
        for name in caches:
            static[name].copy_(trace[t]); body(name)
    torch.cuda.synchronize()
    graphs = {}
    for name in caches:
        g = torch.cuda.CUDAGraph()
        with torch.cuda.graph(g):
            body(name)
        graphs[name] = g
    rt = {n: [] for n in caches}
    for r in range(rounds):
        order = list(caches) if r % 2 == 0 else list(caches)[::-1]
        for name in order:
            def blk():
                for k in range(per_block):
                    static[name].copy_(trace[warm + r * per_block + k]); graphs[name].replay()
            rt[name].append(C.time_replays(blk, 1) / per_block * 1e6)
        a = caches["unset"]
        for name in caches:
            for g in geoms:
                assert torch.equal(a.bank_caches[g.name].view(torch.uint8), caches[name].bank_caches[g.name].view(torch.uint8)), (name, g.name)
    B = {}
    for n, v in rt.items():
        pr = med([u / t for u, t in zip(rt["unset"], v)])
        B[n] = {"median_us": med(v), "paired": pr, "rounds": v}
        print(f"step {n:14s} {med(v):8.1f} us  paired unset/this {pr:.4f}", flush=True)
    json.dump({"A": A, "B": B, "rings": [r.tag for r in RINGS], "vars": VARS, "skipped": skipped, "verified_graph_sets": verified,
               "machine": C.machine_info()}, open(f"{OUT}/probe_var.json", "w"), indent=1, default=str)
print("done", flush=True)
