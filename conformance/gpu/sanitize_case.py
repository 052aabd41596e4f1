#!/usr/bin/env python3
"""A small decode_gather case, eager and in a CUDA graph, for compute-sanitizer.

    python -m conformance.gpu.sanitize_case            # plain run: exit 0 when every copy is exact
    compute-sanitizer --tool memcheck python -m conformance.gpu.sanitize_case

Geometry: 4 banks of 16, 48, 4096+16 and 8192+16 byte rows, 2 layers of 6 experts packed into one
pinned allocation whose last byte is the last expert of the last layer's last bank, a 9-slot cache
inside canaries. Eager counts 0, 1, 4, 9, 9+5 (clamped) and -3; then one captured launch replayed
with three different miss lists. Every call is poisoned first and checked against torch indexing.
The module's default ring, then each ``--rings`` ring (``<ctas>x<stages>x<chunk_bytes>``, as
FREETOKEN_DECODE_GATHER_RING spells it). ``--kernel both`` also runs upstream's fast_index_copy_multi (counts <=
capacity only: it does not clamp). Exit status: 0 exact, 1 a mismatch, 2 no CUDA device.
"""

from __future__ import annotations

import argparse
import random
import sys

from suite.geometry import LARGEST_PLAIN_RING, OPT_IN_RINGS, Ring
from gpukit.launch import call_tma, call_upstream, load_kernels
from gpukit.memory import HostBanks, MissList, SlotCache, check_slot_cache, poison_value, random_misses
from suite.kernels import Kernel

ROWS = [16, 48, 4096 + 16, 8192 + 16]
LAYERS, EXPERTS, SLOTS = 2, 6, 9


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    rings = [LARGEST_PLAIN_RING, *OPT_IN_RINGS]  # the largest ring without the opt-in, the opt-in ones
    ap.add_argument("--rings", type=Ring.parse, nargs="+", default=rings, metavar="RING",
                    help=f"rings besides the default (default: {' '.join(map(str, rings))})")
    ap.add_argument("--kernel", choices=[Kernel.TMA, Kernel.UPSTREAM, "both"], default=Kernel.TMA)
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    if not torch.cuda.is_available():
        print("sanitize_case: no CUDA device", file=sys.stderr)
        return 2
    decode_gather, fast_index_copy = load_kernels()
    dev = torch.device("cuda")
    rings = [None, *dict.fromkeys(args.rings)]  # None: the module's default ring
    banks = HostBanks(LAYERS, EXPERTS, ROWS, dev, seed=5)
    cache = SlotCache(SLOTS, ROWS, dev)
    misses = MissList(SLOTS, "int32", dev)
    rng = random.Random("sanitize")
    failures: list[str] = []
    calls = 0

    def check(what: str, poison: int, dst, src, layer: int, n: int) -> None:
        nonlocal calls
        k = max(0, min(n, SLOTS))
        err = check_slot_cache(cache, poison, [(dst[:k], src[:k], banks.dev[layer])])
        calls += 1
        if err:
            failures.append(f"{what}: {err}")

    kernels = [Kernel.TMA, Kernel.UPSTREAM] if args.kernel == "both" else [Kernel(args.kernel)]
    for kernel in kernels:
        for ring in rings if kernel == Kernel.TMA else [None]:
            tag = str(kernel) if kernel == Kernel.UPSTREAM else f"{kernel} {ring or 'default'}"

            def launch(layer: int, kernel: str = kernel, ring: Ring | None = ring) -> None:
                if kernel == Kernel.TMA:
                    call_tma(decode_gather, cache, banks.src_ptrs[layer], misses.dst, misses.src, misses.num, ring)
                else:
                    call_upstream(fast_index_copy, cache, banks.src_ptrs[layer], misses.dst, misses.src, misses.num)

            counts = (0, 1, 4, SLOTS, SLOTS + 5, -3) if kernel == Kernel.TMA else (0, 1, 4, SLOTS)
            for layer in range(LAYERS):
                for n in counts:
                    dst, src = random_misses(rng, SLOTS, max(0, min(n, SLOTS)), SLOTS, EXPERTS)
                    misses.set(dst, src, n)
                    poison = poison_value(n + layer, rng)
                    cache.poison(poison)
                    launch(layer)
                    check(f"{tag} eager layer {layer} n={n}", poison, dst, src, layer, n)
            torch.cuda.synchronize()
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                launch(LAYERS - 1)
            for i, n in enumerate((SLOTS, 2, 0)):
                dst, src = random_misses(rng, SLOTS, n, SLOTS, EXPERTS)
                misses.set(dst, src, n)
                poison = poison_value(i, rng)
                cache.poison(poison)
                graph.replay()
                check(f"{tag} graph replay {i} n={n}", poison, dst, src, LAYERS - 1, n)
            del graph
    torch.cuda.synchronize()
    banks.close()
    for f in failures:
        print("MISMATCH " + f)
    print(f"sanitize_case: {calls} calls checked, {len(failures)} mismatches, pinned {banks.buf.describe()}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
