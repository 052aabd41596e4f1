"""Neighbour/ring probe: is decode_gather slower INSIDE a decode step than alone?

Development experiment (see README.md here); GPU and the patched freetoken installed:

    PROBE_RINGS=16x4x8K,32x4x4K .nox/build/bin/python bench/probes/probe_neighbour.py

A: 40-layer captured graphs at n = 0, 1, 2 of upstream (twice) and each ring, alone and with a
one-CTA cupy kernel before every layer (default shared-memory carveout, and carveout 100% shared),
to see whether alternating with a kernel of another shared-memory configuration costs the ring
anything. B: the captured decode step of the real OffloadMoeCache (40 layers, Zipf routing, ~10%
misses) for unset, unset A/A, ensure_experts alone, and tma with each ring
(FREETOKEN_DECODE_GATHER_RING), 7 alternating rounds, the caches' bytes compared every round.
Writes ``$OUT/probe_step.json`` (default /tmp).
"""
import json, os, sys, time, statistics
sys.path.insert(0, os.getcwd())
import torch, cupy
from bench import common as C
from freetoken.moe.offload_cache import OffloadMoeCache

OUT = os.environ.get("OUT", "/tmp")
RINGS = [C.Ring.parse(r) for r in os.environ.get("PROBE_RINGS", "16x4x8K,32x4x4K").split(",")]
dev = torch.device("cuda")
dgm, fic = C.load_kernels()
print("errors", C.precompile(dgm, fic, RINGS, progress=print), flush=True)
LOG = {"rings": [r.tag for r in RINGS]}
med = statistics.median

SRC = """extern "C" __global__ void touch%s(int* p) { if (threadIdx.x == 0) p[blockIdx.x] += 1; }"""
k_def = cupy.RawKernel(SRC % "A", "touchA")
k_shm = cupy.RawKernel(SRC % "B", "touchB")
k_shm.preferred_shared_memory_carveout = 100
ctr = cupy.zeros(64, dtype=cupy.int32)


def neigh(k):
    def f():
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):  # the capturing stream
            k((1,), (32,), (ctr,))
    return f


# ---------------------------------------------------------------- A
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


def mk(r):
    return lambda l: dgm.decode_gather_jit(dst_ptrs, src_ptrs[l % NSRC], feat, evict, srci, num, **r.kwargs())


KS = {"up": up, "upAA": up}
for r in RINGS:
    KS[r.tag] = mk(r)
NB = {"alone": None, "nbdef": neigh(k_def), "nbshm": neigh(k_shm)}


def set_misses(n):
    perm = torch.randperm(SLOTS, device=dev)[: max(n, 1)].to(torch.int32)
    evict.zero_(); srci.zero_()
    evict[:n] = perm[:n]
    srci[:n] = torch.randint(0, E, (n,), device=dev, dtype=torch.int32)
    num.fill_(n)


def verify(n):
    torch.cuda.synchronize()
    if n == 0:
        return True
    e, s = evict[:n].long(), srci[:n].long()
    return all(torch.equal(dst[b][e], gsrc[(LAYERS - 1) % NSRC][b][s]) for b in range(len(FEAT)))


A = {}
t0 = time.time()
for n in [0, 1, 2]:
    set_misses(n)
    graphs = {}
    for kn, fn in KS.items():
        for nb, nf in NB.items():
            for l in range(LAYERS):
                fn(l)
            torch.cuda.synchronize()
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for l in range(LAYERS):
                    if nf:
                        nf()
                    fn(l)
            graphs[(kn, nb)] = g
    # neighbour alone
    for nb, nf in NB.items():
        if nf:
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                for l in range(LAYERS):
                    nf()
            graphs[("none", nb)] = g
    times = {k: [] for k in graphs}
    for r in range(5):
        order = list(graphs) if r % 2 == 0 else list(graphs)[::-1]
        for key in order:
            g = graphs[key]
            for t in dst:
                t.fill_(0xA5)
            g.replay()
            ok = verify(n) if key[0] != "none" else True
            assert ok, (n, key)
            times[key].append(C.time_replays(g.replay, 20) / 20 / LAYERS * 1e6)
    res = {f"{k[0]}|{k[1]}": med(v) for k, v in times.items()}
    A[n] = res
    print(f"--- A n={n}", flush=True)
    for nb in NB:
        line = f"  {nb:6s} " + " ".join(f"{kn}={res[f'{kn}|{nb}']:.2f}" for kn in KS)
        print(line, flush=True)
    for nb in ("nbdef", "nbshm"):
        print(f"  neighbour {nb} alone {res[f'none|{nb}']:.2f}", flush=True)
    del graphs
print(f"A done {time.time()-t0:.0f}s", flush=True)
LOG["A"] = A
json.dump(LOG, open(f"{OUT}/probe_step.json", "w"), indent=1)

# ---------------------------------------------------------------- B
banks = C.HostBanks(NSRC, E, C.NVFP4_ROW_BYTES, dev, seed=1)
geoms = C.nvfp4_banks()
layers, top_k = 40, 8
cache_size = 1920
typed = [banks.typed(layer % NSRC, geoms) for layer in range(layers)]
sources = {g.name: [typed[layer][g.name] for layer in range(layers)] for g in geoms}
variants = [("unset", None, None), ("ensure", None, None)] + [(f"tma{r.tag}", "tma", r) for r in RINGS] + [("unsetAA", None, None)]
caches = {}
for name, val, ring in variants:
    os.environ.pop("FREETOKEN_DECODE_GATHER", None); os.environ.pop("FREETOKEN_DECODE_GATHER_RING", None)
    if val:
        os.environ["FREETOKEN_DECODE_GATHER"] = val
        os.environ["FREETOKEN_DECODE_GATHER_RING"] = f"{ring.ctas}x{ring.stages}x{ring.chunk_bytes}"
    c = OffloadMoeCache(num_layers=layers, num_experts=E, cache_size=cache_size, device=dev, quant_format="nvfp4")
    c.set_bank_sources(sources)
    caches[name] = c
os.environ.pop("FREETOKEN_DECODE_GATHER", None); os.environ.pop("FREETOKEN_DECODE_GATHER_RING", None)
warm, per_block, rounds = 40, 10, 7
trace = C.zipf_routing_trace(warm + rounds * per_block, layers, E, top_k, 1.867, batch=1, seed=4).to(dev)
static = {n: torch.empty((layers, 1, top_k), dtype=torch.int32, device=dev) for n in caches}


def body(name):
    c = caches[name]
    for layer in range(layers):
        c.ensure_experts(layer, static[name][layer])
        if name != "ensure":
            c.copy_missing()


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
        if name.startswith("tma"):
            for g in geoms:
                assert torch.equal(a.bank_caches[g.name].view(torch.uint8), caches[name].bank_caches[g.name].view(torch.uint8)), (name, g.name)
            assert torch.equal(a.slot_for_id, caches[name].slot_for_id)
B = {n: {"median_us": med(v), "rounds": v} for n, v in rt.items()}
for n, v in B.items():
    pr = med([u / t for u, t in zip(rt["unset"], v["rounds"])])
    print(f"B {n:14s} {v['median_us']:8.1f} us/step  paired unset/this {pr:.4f}", flush=True)
LOG["B"] = B
LOG["machine"] = C.machine_info()
json.dump(LOG, open(f"{OUT}/probe_step.json", "w"), indent=1, default=str)
print("done", flush=True)
