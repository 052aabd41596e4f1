"""Device timing: CUDA events around graph replays and the copy-engine ceiling."""

from __future__ import annotations

import statistics
from typing import Any, Callable

from gpukit.machine import pcie_under_load
from gpukit.memory import PinnedBuffer


def time_replays(run: Callable[[], None], reps: int) -> float:
    """Device seconds of ``reps`` calls of ``run`` (graph replays) between two events, from an idle GPU."""
    import torch

    torch.cuda.synchronize()
    a = torch.cuda.Event(enable_timing=True)
    b = torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        run()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / 1e3


def copy_engine_ceiling(nbytes: int = 256 << 20, reps: int = 10, device="cuda") -> dict[str, Any]:
    """Host->device copy-engine bandwidth: one ``nbytes`` pinned->VRAM copy, median of ``reps``
    event-timed copies, verified word-exact against a device copy of the source."""
    import torch

    buf = PinnedBuffer(nbytes)
    src_dev = torch.empty(nbytes, dtype=torch.uint8, device=device)
    src_dev.random_(0, 256)
    buf.tensor.copy_(src_dev)
    dst = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst.copy_(buf.tensor, non_blocking=True)  # warm
    times = []
    for _ in range(reps):
        dst.fill_(0xA5)
        times.append(time_replays(lambda: dst.copy_(buf.tensor, non_blocking=True), 1))
    ok = bool(torch.equal(dst, src_dev))

    def keep_link_busy() -> None:  # ~0.4 s of back-to-back copies while nvidia-smi samples the link
        for _ in range(max(1, int(2e10 // nbytes))):
            dst.copy_(buf.tensor, non_blocking=True)
        torch.cuda.synchronize()

    load = pcie_under_load(keep_link_busy)
    med = statistics.median(times)
    buf.close()
    return {
        "bytes": nbytes,
        "reps": reps,
        "seconds": times,
        "median_s": med,
        "gbps": nbytes / med / 1e9,
        "verified": ok,
        "pinned": buf.describe(),
        **load,
    }


def reps_for(target_s: float, est_s: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(target_s / max(est_s, 1e-9)))))
