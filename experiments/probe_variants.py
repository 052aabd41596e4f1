"""Prologue/ring probe: decode_gather kernel variants x rings against upstream, same buffers.

Development experiment behind the kernel's prologue (see README.md here); needs a GPU and the
patched freetoken installed (``nox -s apply build``, then this file with that session's Python):

    PROBE_VARS=current,old PROBE_RINGS=16x4x8K PROBE_NS=0,1,2,600 \
        .nox/patched/bin/python -m experiments.probe_variants

It writes the variants of :mod:`variants` next to the installed decode_gather.cuh, JIT-builds each
(variant, ring) as its own module, and times per-layer 40-layer captured graphs (4 layers for
n > 32) of upstream fast_index_copy_multi (twice: the A/A control) and every module, 7 rounds in
alternating order, every timed set verified byte-exact against a device copy of the sources.
``PROBE_STEP`` ("variant:ring,...") adds the captured decode step of the real OffloadMoeCache
(upstream, upstream A/A, and those modules). Writes ``$OUT/probe_var.json`` (default: the current directory).
"""

import logging
import os
import time
from concurrent.futures import ThreadPoolExecutor

import torch

from experiments import harness, variants
from suite.kernels import Kernel
from gpukit.decode_step import StepVariant
from suite.geometry import UPSTREAM_BLOCKS_PER_BANK, UPSTREAM_THREADS, Ring
from gpukit.kernels import load_kernels, probe_headers
from suite.log import configure

logger = logging.getLogger("experiments.probe_variants")  # its name also when run as __main__

RINGS = [Ring.parse(r) for r in os.environ.get("PROBE_RINGS", "16x4x8K,32x4x4K").split(",")]
VARS = os.environ.get("PROBE_VARS", "current,old,serial_loop,serial_init").split(",")
NS = [int(x) for x in os.environ.get("PROBE_NS", "0,1,2,4,8").split(",")]
STEP = [tuple(x.split(":")) for x in os.environ.get("PROBE_STEP", "").split(",") if x]


def main() -> None:
    configure()
    from freetoken.kernel import utils as freetoken_utils

    dev = torch.device("cuda")
    dgm, fic = load_kernels()
    files, texts, skipped = variants.make(freetoken_utils.KERNEL_PATH / "jit", VARS)
    for name, why in skipped.items():
        logger.info(f"variant {name} skipped: {why}")
    names = [v for v in VARS if v in files]

    t0 = time.time()
    with probe_headers(texts), ThreadPoolExecutor(12) as ex:  # the variant headers exist while they build
        futs = {(v, r): ex.submit(variants.load, files, v, r) for v in names for r in RINGS}
        fic._jit_fast_index_copy_multi_module(num_threads=UPSTREAM_THREADS, blocks_per_bank=UPSTREAM_BLOCKS_PER_BANK)
        mods = {k: f.result() for k, f in futs.items()}
    logger.info(f"{len(mods)} modules in {time.time() - t0:.0f}s")

    gather = harness.Gather(dev)
    kernels = {Kernel.UPSTREAM: gather.upstream(fic), Kernel.UPSTREAM_AA: gather.upstream(fic)}
    kernels.update({f"{v}:{r.tag}": gather.module(m) for (v, r), m in mods.items()})
    log: dict = {"rings": [r.tag for r in RINGS], "vars": names, "skipped": skipped, "A": {}}
    for n in NS:
        gather.set_misses(n)
        graphs = {k: gather.graph(fn) for k, fn in kernels.items()}
        times = gather.time_rounds(graphs, copies=lambda key: True)
        res = {k: harness.median(v) for k, v in times.items()}
        rat = harness.paired(times, Kernel.UPSTREAM)
        log["A"][n] = {"us": res, "paired_ratio": rat, "rounds": times}
        logger.info(f"--- n={n} {Kernel.UPSTREAM}={res[Kernel.UPSTREAM]:.2f} A/A={rat[Kernel.UPSTREAM_AA]:.4f}")
        for r in RINGS:
            logger.info(
                f"  {r.tag:9s} "
                + " ".join(f"{v}={res[f'{v}:{r.tag}']:.2f}({rat[f'{v}:{r.tag}']:.4f})" for v in names))
    if STEP:
        specs = [StepVariant(Kernel.UPSTREAM), StepVariant(Kernel.UPSTREAM_AA)]
        specs += [
            StepVariant(f"{v}:{t}", {"FREETOKEN_DECODE_GATHER": "tma"}, module=mods[(v, Ring.parse(t))])
            for v, t in STEP
        ]
        log["B"] = harness.decode_step(specs, rounds=9)
        harness.print_step(log["B"])
    harness.save(log, "probe_var.json")


if __name__ == "__main__":
    main()
