"""Where a process's first ``auto`` probe loses its time (exploration; decides nothing).

``baseline``: one geometry's auto cache built twice in a fresh process, the first build under cProfile
(sorted by own time). ``warm``: first, each CUDA operation the probe uses runs once on a tiny tensor,
timed to its completion, and a one-kernel graph is captured on a side stream and replayed, timed; then
the cache is built twice as in ``baseline``.

Run (GPU, in .nox/patched after ``nox -s apply build`` with the full kernel set):
python -m experiments.probe_first baseline|warm MODEL
"""
import cProfile
import pstats
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(".work/upstream/benchmarks").resolve()))
import bench_decode_gather as bench  # noqa: E402
from freetoken.moe import decode_gather_auto as auto  # noqa: E402


def timed(what: str, fn) -> None:
    torch.cuda.synchronize()
    start = time.perf_counter()
    fn()
    torch.cuda.synchronize()
    print(f"first {what}: {(time.perf_counter() - start) * 1e3:.2f} ms", flush=True)


def warm(dev: torch.device) -> None:
    a = torch.zeros(64, dtype=torch.int64, device=dev)
    b = torch.ones(64, dtype=torch.int64, device=dev)
    flag = torch.zeros(1, dtype=torch.bool, device=dev)
    timed("pin_memory", lambda: torch.zeros(64).pin_memory())
    timed("event pair", lambda: [torch.cuda.Event(enable_timing=True) for _ in "ab"])
    timed("ge", lambda: a.ge(0))
    timed("any", lambda: a.any())
    timed("ne", lambda: a.ne(b))
    timed("ne+any", lambda: a.ne(b).any())
    timed("logical_or_", lambda: flag[0].logical_or_(a.ne(b).any()))
    timed("zero_", lambda: b.zero_())
    timed("H2D copy", lambda: a.copy_(torch.arange(64).pin_memory(), non_blocking=True))
    side, graph = torch.cuda.Stream(dev), torch.cuda.CUDAGraph()

    def capture():
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            graph.capture_begin()
            b.add_(1)
            graph.capture_end()
        torch.cuda.current_stream(dev).wait_stream(side)

    timed("graph capture+instantiate", capture)
    timed("graph replay", graph.replay)
    graph2 = torch.cuda.CUDAGraph()

    def capture2():
        side.wait_stream(torch.cuda.current_stream(dev))
        with torch.cuda.stream(side):
            graph2.capture_begin()
            b.add_(1)
            graph2.capture_end()
        torch.cuda.current_stream(dev).wait_stream(side)

    timed("(second) graph capture+instantiate", capture2)
    timed("(second) graph replay", graph2.replay)


def main(mode: str, model: str) -> None:
    dev = torch.device("cuda", 0)
    g = bench.plan(bench.parse_args(["--model", model, "--full-depth"]))[0]
    banks = bench.host_banks([g], dev)[model]
    torch.cuda.synchronize()
    print(f"## {mode} {model}", flush=True)
    if mode == "warm":
        warm(dev)
    for run in range(2):
        auto._CHOICES.clear()
        prof, start = cProfile.Profile(), time.perf_counter()
        if run == 0:
            prof.enable()
        cache = bench.build_cache("auto", {bench.DECODE_GATHER_ENV: "auto"}, g, banks, dev)
        prof.disable()
        c = cache.decode_gather_auto
        print(f"## {mode} {model} build {run}: {(time.perf_counter() - start) * 1e3:.0f} ms; {auto.describe(c)}", flush=True)
        if run == 0:
            pstats.Stats(prof).sort_stats("tottime").print_stats(25)
        del cache


if __name__ == "__main__":
    main(*sys.argv[1:3])
