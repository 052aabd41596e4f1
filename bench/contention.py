"""Two links at once (``python -m bench.contention``, two CUDA GPUs): one process per GPU, as a server runs one
FreeToken rank per GPU, builds a real ``OffloadMoeCache`` per kernel over its own pinned NVFP4 banks and replays
a captured 40-layer ``copy_missing`` graph of n experts per layer. Every round times, per kernel and n, GPU 0
alone, GPU 1 alone, then both at once (started at a barrier), every set byte-verified: each GPU's concurrent
rate against its solo rate, with the NUMA node of each GPU and of its banks' pages (``/proc/self/numa_maps``).
"""

from __future__ import annotations

import functools
import logging
import os
import statistics
import time
from pathlib import Path

from bench import entry
from suite.kernels import Kernel

KERNELS = (Kernel.UPSTREAM, Kernel.TMA)
POISON = 0x5A


log = logging.getLogger("bench.contention").info  # the messages (named: the module runs as __main__); main() sets their format


def numa_of(addr: int) -> str | None:
    """The numa_maps page counts (``N0=.. N1=..``) of the mapping holding ``addr``."""
    try:
        lines = Path("/proc/self/numa_maps").read_text().splitlines()
    except OSError:
        return None
    mappings = [(int(line.split()[0], 16), line) for line in lines]
    best = max((m for m in mappings if m[0] <= addr), key=lambda m: m[0], default=None)
    if best is None:
        return None
    return " ".join(f for f in best[1].split() if f.startswith("N") and "=" in f) or best[1]


def gpu_numa_node(torch, device: int) -> str | None:
    """The NUMA node sysfs gives the GPU's PCI function, or None where sysfs does not say."""
    p = torch.cuda.get_device_properties(device)
    bus = f"{p.pci_domain_id:04x}:{p.pci_bus_id:02x}:{p.pci_device_id:02x}.0"
    node = Path("/sys/bus/pci/devices") / bus / "numa_node"
    return node.read_text().strip() if node.exists() else None


def worker(rank: int, args, barrier, queue) -> None:
    import torch

    from freetoken.moe.offload_cache import OffloadMoeCache

    from gpukit.decode_step import copy_all_layers, expected_slots, gather_env, stage_misses
    from gpukit.launch import runs_ring
    from suite.geometry import NVFP4_ROW_BYTES
    from suite.rounds import run_rounds
    from gpukit.timing import bench

    torch.cuda.set_device(rank)
    dev = torch.device("cuda", rank)
    layers, experts = args.layers, 256
    gen = torch.Generator(device=dev).manual_seed(10 + rank)
    host = [[torch.randint(0, 256, (experts, f), dtype=torch.uint8, device=dev, generator=gen).cpu().pin_memory()
             for f in NVFP4_ROW_BYTES] for _ in range(args.sources)]  # fmt: skip
    caches = {}
    for kernel in KERNELS:
        with gather_env(kernel.env):
            c = OffloadMoeCache(num_layers=layers, num_experts=experts, cache_size=experts, device=dev,
                                quant_format="nvfp4", prefill_overlap=False)
        c.set_bank_sources({name: [host[layer % args.sources][k] for layer in range(layers)]
                            for k, name in enumerate(c.bank_schema)})
        assert runs_ring(c) == (kernel == Kernel.TMA)
        caches[kernel] = c
    info = {"rank": rank, "gpu": torch.cuda.get_device_name(dev), "gpu_numa_node": gpu_numa_node(torch, rank),
            "banks_numa_pages": numa_of(host[0][0].data_ptr()), "cpu_affinity": sorted(os.sched_getaffinity(0))[:4]}
    rows = []
    for n in args.ns:
        dst = torch.randperm(experts, device=dev, generator=gen)[:n].to(torch.int32)
        src = torch.randperm(experts, device=dev, generator=gen)[:n].to(torch.int32)
        expected = expected_slots(host[(layers - 1) % args.sources], experts, dst, src, POISON)
        graphs = {}
        for kernel, c in caches.items():
            stage_misses(c, dst, src)
            copy_all_layers(c, layers)  # eager first: JIT builds outside capture
            g = torch.cuda.CUDAGraph()
            with torch.cuda.graph(g):
                copy_all_layers(c, layers)
            graphs[kernel] = g
        # each GPU sizes its replay count from its own upstream replay; the links are alike, so the two
        # sets of a "both" phase last about as long and overlap
        reps = max(2, round(args.target_s / bench(graphs[Kernel.UPSTREAM].replay)[0]))
        queue.put(("reps", rank, n, reps))

        def phases(kernel: str, r: int) -> list[float]:
            """This GPU's timed sets of round ``r``: alone, idle while the other is alone, then both at once."""
            c, timed = caches[kernel], []
            for phase in ("solo0", "solo1", "both"):
                active = phase == "both" or phase == f"solo{rank}"
                if active:
                    for name in c.bank_schema:
                        c.bank_caches[name].view(torch.uint8).fill_(POISON)
                    torch.cuda.synchronize()
                barrier.wait()
                if active:
                    t0 = time.perf_counter()
                    secs = bench(graphs[kernel].replay, reps=reps)[0]
                    wall = time.perf_counter() - t0
                    ok = all(torch.equal(c.bank_caches[name].view(torch.uint8).reshape(experts, -1), e)
                             for name, e in zip(c.bank_schema, expected))
                    rows.append({"n": n, "kernel": kernel, "phase": phase, "round": r, "seconds": secs,
                                 "wall_s": wall, "reps": reps, "verified": ok,
                                 "gbps": n * sum(NVFP4_ROW_BYTES) * layers * reps / secs / 1e9})
                    timed.append(secs)
                barrier.wait()
            return timed

        # both processes run the same alternating order, so their barriers pair up
        run_rounds({kernel: functools.partial(phases, kernel) for kernel in KERNELS}, args.rounds)
        graphs.clear()  # free the captured graphs before the next n
    queue.put(("done", rank, info, rows))


def summarize(rows: list[dict], ns, ranks=(0, 1)) -> list[dict]:
    out = []
    for n in ns:
        for kernel in KERNELS:
            for rank in ranks:
                sel = [x for x in rows if x["rank"] == rank and x["n"] == n and x["kernel"] == kernel]
                solo = [x["gbps"] for x in sel if x["phase"] == f"solo{rank}"]
                both = [x["gbps"] for x in sel if x["phase"] == "both"]
                if not solo or not both:
                    continue
                s, b = statistics.median(solo), statistics.median(both)
                out.append({"n": n, "kernel": kernel, "rank": rank, "solo_gbps": s, "both_gbps": b,
                            "kept": b / s, "rounds": len(both)})
    return out


def main(argv: list[str] | None = None) -> int:
    import torch
    import torch.multiprocessing as mp

    p = entry.parser("contention")
    p.add_argument("--ns", type=int, nargs="*", default=[1, 4, 32])
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--layers", type=int, default=40)
    p.add_argument("--sources", type=int, default=2)
    p.add_argument("--target-s", type=float, default=0.25, help="device seconds per timed set")
    args = p.parse_args(argv)
    if torch.cuda.device_count() < 2:
        log(f"needs two GPUs, found {torch.cuda.device_count()}")
        return 2
    ctx = mp.get_context("spawn")
    barrier, queue = ctx.Barrier(2), ctx.Queue()
    procs = [ctx.Process(target=worker, args=(rank, args, barrier, queue)) for rank in (0, 1)]
    for proc in procs:
        proc.start()
    infos, rows, done = {}, [], 0
    while done < 2:
        msg = queue.get(timeout=900)
        if msg[0] == "reps":
            log(f"rank {msg[1]} n={msg[2]}: {msg[3]} replays per set")
        else:
            _, rank, info, worker_rows = msg
            infos[rank] = info
            rows += [dict(x, rank=rank) for x in worker_rows]
            done += 1
    for proc in procs:
        proc.join()
    summary = summarize(rows, args.ns)
    for s in summary:
        log(f"n={s['n']:>2} {s['kernel']:>8} GPU{s['rank']}: solo {s['solo_gbps']:.1f} GB/s, "
            f"both {s['both_gbps']:.1f} GB/s, kept {s['kept']:.3f}")
    wrong = [x for x in rows if not x["verified"]]
    from suite.models import Contention

    doc = Contention(gpus=infos, args=vars(args), summary=summary, rows=rows, wrong_sets=len(wrong))
    entry.save("contention", args, doc)
    log(f"{len(rows)} timed sets, {len(wrong)} wrong")
    return 1 if wrong or any(proc.exitcode for proc in procs) else 0


if __name__ == "__main__":
    raise SystemExit(main())
