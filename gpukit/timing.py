"""Device timing: the one timing entry (:func:`bench`), the device clock pytest-benchmark times with,
and the copy-engine ceiling.

    seconds = bench(graph.replay, warmup=1, reps=20, rounds=7, before=poison, after=verify)

:data:`device_clock` (``--benchmark-timer=gpukit.timing.device_clock``) reads seconds off CUDA events on the
current stream: each read records an event, waits for it and adds the device time since the previous read to
a float64 total, so the difference of two reads around a target is the device time between two events (their
~0.5 µs resolution, :data:`RESOLUTION_S`, which bench/conftest.py gives pytest-benchmark as its precision).
"""

from __future__ import annotations

import statistics
from typing import Any, Callable

from gpukit.machine import pcie_under_load
from gpukit.memory import PinnedBuffer


#: cudaEventElapsedTime's resolution (the CUDA runtime documents "around 0.5 microseconds").
RESOLUTION_S = 0.5e-6


class DeviceClock:
    """Seconds of device time, read as CUDA events (see the module docstring).

    ``events``: a factory of event objects with ``record(stream)``, ``synchronize()`` and
    ``elapsed_time(later)`` (ms), as ``torch.cuda.Event(enable_timing=True)`` has; ``stream``: a
    callable giving the stream to record on (default: torch's current stream). Both default to torch,
    imported at the first read; tests pass fakes."""

    def __init__(self, events: Callable[[], Any] | None = None, stream: Callable[[], Any] | None = None):
        self._events, self._stream = events, stream
        self._last: Any = None
        self._total = 0.0

    def __call__(self) -> float:
        if self._events is None:
            import torch

            self._events = lambda: torch.cuda.Event(enable_timing=True)
            self._stream = self._stream or torch.cuda.current_stream
        event = self._events()
        event.record(self._stream() if self._stream is not None else None)
        event.synchronize()
        if self._last is not None:
            self._total += self._last.elapsed_time(event) / 1e3
        self._last = event
        return self._total

    def __repr__(self) -> str:  # how pytest-benchmark names the timer: gpukit.timing.device_clock
        return "device_clock"


#: The clock ``--benchmark-timer=gpukit.timing.device_clock`` names (one per process).
device_clock = DeviceClock()


def bench(fn: Callable[[], Any], warmup: int = 0, reps: int = 1, rounds: int = 1, *,
          before: Callable[[int], Any] | None = None, after: Callable[[int], Any] | None = None,
          events: Callable[[], Any] | None = None, sync: Callable[[], None] | None = None) -> list[float]:  # fmt: skip
    """Per-round device seconds of ``fn`` (a graph replay, a kernel call): ``warmup`` calls first, then
    ``rounds`` rounds, each ``before(i)``, ``reps`` calls between two events recorded from an idle GPU,
    ``after(i)`` (e.g. poison the slots, then verify them). A round's figure is the device time of its
    ``reps`` calls together (divide by ``reps`` for one call). ``events`` and ``sync``: an event factory
    and a device-wide synchronize, torch's by default (tests pass fakes, as :class:`DeviceClock` takes)."""
    if events is None or sync is None:
        import torch

        events = events or (lambda: torch.cuda.Event(enable_timing=True))
        sync = sync or torch.cuda.synchronize
    for _ in range(warmup):
        fn()
    out = []
    for i in range(rounds):
        if before is not None:
            before(i)
        sync()
        a, b = events(), events()
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        out.append(a.elapsed_time(b) / 1e3)
        if after is not None:
            after(i)
    return out


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
        times += bench(lambda: dst.copy_(buf.tensor, non_blocking=True))
    ok = bool(torch.equal(dst, src_dev))

    def keep_link_busy() -> None:  # ~0.4 s of back-to-back copies while nvidia-smi samples the link
        for _ in range(max(1, int(2e10 // nbytes))):
            dst.copy_(buf.tensor, non_blocking=True)
        torch.cuda.synchronize()

    load = pcie_under_load(keep_link_busy)
    med = statistics.median(times)
    buf.close()
    return {"bytes": nbytes, "reps": reps, "seconds": times, "median_s": med, "gbps": nbytes / med / 1e9,
            "verified": ok, "pinned": buf.describe(), **load}  # fmt: skip


def reps_for(target_s: float, est_s: float, lo: int, hi: int) -> int:
    return int(min(hi, max(lo, round(target_s / max(est_s, 1e-9)))))
