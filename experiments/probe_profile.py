"""Where auto's probe spends its time (exploration; decides nothing): one geometry's ``auto`` cache,
built twice in a fresh process over the series' benchmark banks, each build under cProfile.

Run (GPU, the series_bench venv): python -m experiments.probe_profile glm4.7-nvfp4
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


def main(model: str) -> None:
    dev = torch.device("cuda", 0)
    g = bench.plan(bench.parse_args(["--model", model, "--full-depth"]))[0]
    banks = bench.host_banks([g], dev)[model]
    torch.cuda.synchronize()
    for run in range(2):
        auto._CHOICES.clear()
        prof, start = cProfile.Profile(), time.perf_counter()
        prof.enable()
        cache = bench.build_cache("auto", {bench.DECODE_GATHER_ENV: "auto"}, g, banks, dev)
        prof.disable()
        c = cache.decode_gather_auto
        print(f"## {model} build {run}: {(time.perf_counter() - start) * 1e3:.0f} ms; {auto.describe(c)}", flush=True)
        pstats.Stats(prof).sort_stats("cumulative").print_stats(30)
        del cache


if __name__ == "__main__":
    for name in sys.argv[1:]:
        main(name)
