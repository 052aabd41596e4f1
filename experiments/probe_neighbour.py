"""Neighbour/ring probe: is decode_gather slower INSIDE a decode step than alone?

Development experiment (see README.md here); GPU and the patched freetoken installed:

    PROBE_RINGS=16x4x8K,32x4x4K .nox/patched/bin/python -m experiments.probe_neighbour

A: 40-layer captured graphs at n = 0, 1, 2 of upstream (twice) and each ring, alone and with a
one-CTA cupy kernel before every layer (default shared-memory carveout, and carveout 100% shared),
to see whether alternating with a kernel of another shared-memory configuration costs the ring
anything. B: the captured decode step of the real OffloadMoeCache (40 layers, Zipf routing, ~10%
misses) for upstream, upstream A/A, ensure_experts alone, and tma with each ring
(FREETOKEN_DECODE_GATHER_RING), 7 alternating rounds, the caches' bytes compared every round.
Writes ``$OUT/probe_step.json`` (default: the current directory).
"""

import logging
import os
import time

import cupy
import torch

from experiments import harness
from suite.kernels import Kernel
from gpukit.decode_step import StepVariant
from suite.geometry import Ring
from gpukit.kernels import load_kernels, precompile
from suite.log import configure

logger = logging.getLogger("experiments.probe_neighbour")  # its name also when run as __main__

RINGS = [Ring.parse(r) for r in os.environ.get("PROBE_RINGS", "16x4x8K,32x4x4K").split(",")]

SRC = """extern "C" __global__ void touch%s(int* p) { if (threadIdx.x == 0) p[blockIdx.x] += 1; }"""
ctr = cupy.zeros(64, dtype=cupy.int32)


def neighbour(name: str, carveout: int | None):
    """A one-CTA kernel launched on torch's current (capturing) stream; ``carveout``: % shared memory."""
    k = cupy.RawKernel(SRC % name, f"touch{name}")
    if carveout is not None:
        k.preferred_shared_memory_carveout = carveout

    def launch() -> None:
        with cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream):
            k((1,), (32,), (ctr,))

    return launch


def main() -> None:
    configure()
    dev = torch.device("cuda")
    dgm, fic = load_kernels()
    errors = precompile(dgm, fic, RINGS, progress=logger.info)
    assert not errors, errors
    log: dict = {"rings": [r.tag for r in RINGS]}
    gather = harness.Gather(dev)
    kernels = {Kernel.UPSTREAM: gather.upstream(fic), Kernel.UPSTREAM_AA: gather.upstream(fic),
               **{r.tag: gather.ring(dgm, r) for r in RINGS}}  # fmt: skip
    neighbours = {"alone": None, "nbdef": neighbour("A", None), "nbshm": neighbour("B", 100)}
    log["A"] = {}
    t0 = time.time()
    for n in (0, 1, 2):
        gather.set_misses(n)
        graphs = {(kn, nb): gather.graph(fn, before) for kn, fn in kernels.items() for nb, before in neighbours.items()}
        graphs.update({("none", nb): gather.graph(None, before) for nb, before in neighbours.items() if before})
        times = gather.time_rounds(graphs, copies=lambda key: key[0] != "none")
        res = {f"{k[0]}|{k[1]}": harness.median(v) for k, v in times.items()}
        log["A"][n] = res
        logger.info(f"--- A n={n}")
        for nb in neighbours:
            logger.info(f"  {nb:6s} " + " ".join(f"{kn}={res[f'{kn}|{nb}']:.2f}" for kn in kernels))
        for nb in ("nbdef", "nbshm"):
            logger.info(f"  neighbour {nb} alone {res[f'none|{nb}']:.2f}")
    logger.info(f"A done {time.time() - t0:.0f}s")
    specs = [StepVariant(Kernel.UPSTREAM), StepVariant("ensure", copy=False)]
    specs += [
        StepVariant(f"tma{r.tag}", {"FREETOKEN_DECODE_GATHER": "tma", "FREETOKEN_DECODE_GATHER_RING": r.env})
        for r in RINGS
    ]
    specs.append(StepVariant(Kernel.UPSTREAM_AA))
    log["B"] = harness.decode_step(specs)
    harness.print_step(log["B"])
    harness.save(log, "probe_step.json")


if __name__ == "__main__":
    main()
