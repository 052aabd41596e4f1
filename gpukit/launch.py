"""Kernel handles: the installed decode_gather and fast_index_copy modules, their calls on a slot-cache
descriptor, parallel JIT builds and a launch counter."""

from __future__ import annotations

import contextlib
import functools
import time
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping

from suite.geometry import UPSTREAM_BLOCKS_PER_BANK, UPSTREAM_THREADS, Ring
from gpukit.memory import SlotCache
from suite.kernels import TMA_FACTORY, UPSTREAM_FACTORY


def load_kernels():
    """``(decode_gather module, fast_index_copy module)`` from the installed freetoken."""
    from freetoken.kernel import decode_gather
    from freetoken.kernel import fast_index_copy

    return decode_gather, fast_index_copy


@contextlib.contextmanager
def probe_headers(texts: Mapping[str, str], jit_dir: Path | None = None) -> Iterator[Path]:
    """Lay probe kernels' headers ({file name: text}) beside the installed JIT headers for the block (so
    their relative includes resolve while they build) and remove them after, also on error: the installed
    freetoken must not keep them (its own tests scan that directory, and a later run would build a stale
    probe). An existing file is never overwritten. Yields the directory (default: freetoken's ``jit/``)."""
    if jit_dir is None:
        from freetoken.kernel.utils import KERNEL_PATH

        jit_dir = KERNEL_PATH / "jit"
    if clash := sorted(n for n in texts if (jit_dir / n).exists()):
        raise FileExistsError(f"{jit_dir}: {clash} exist already; a probe header never replaces a file there")
    written: list[Path] = []
    try:
        for name, text in texts.items():
            (jit_dir / name).write_text(text)
            written.append(jit_dir / name)
        yield jit_dir
    finally:
        for path in written:
            path.unlink(missing_ok=True)


def runs_ring(cache) -> bool:
    """Whether ``cache``'s decode misses run the ring: the kernel of ``copy_missing``'s launcher (chosen once
    in ``_build_copy_plan``), read by :func:`suite.kernels.launched`."""
    from suite.kernels import Kernel, launched

    return launched(cache._decode_miss_copy, cache._copy_blocks_per_bank).kernel is Kernel.TMA


def default_ring(decode_gather) -> Ring:
    return Ring(int(decode_gather.DEFAULT_CTAS), int(decode_gather.DEFAULT_STAGES), int(decode_gather.DEFAULT_CHUNK_BYTES))


def precompile(decode_gather, fast_index_copy, rings: Iterable[Ring],
               upstream_blocks: Iterable[int] = (UPSTREAM_BLOCKS_PER_BANK,), workers: int = 8,
               progress: Callable[[str], None] | None = None) -> dict[str, str]:  # fmt: skip
    """JIT-build every ring and upstream width in parallel threads (nvcc runs as subprocesses); returns
    {name: error} for the builds that failed."""
    from concurrent.futures import ThreadPoolExecutor

    ring = decode_gather.decode_gather_module
    build = functools.partial(getattr(fast_index_copy, UPSTREAM_FACTORY), num_threads=UPSTREAM_THREADS)
    jobs: dict[str, Callable[[], Any]] = {f"ring {r}": functools.partial(ring, **r.kwargs()) for r in rings}
    jobs |= {f"upstream {UPSTREAM_THREADS}x{b}": functools.partial(build, blocks_per_bank=b) for b in upstream_blocks}
    errors: dict[str, str] = {}
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max(1, workers)) as ex:
        futs = {name: ex.submit(fn) for name, fn in jobs.items()}
        for name, fut in futs.items():
            try:
                fut.result()
            except Exception as e:
                errors[name] = f"{type(e).__name__}: {str(e)[-400:]}"
            if progress:
                progress(f"built {name}" + (" FAILED" if name in errors else ""))
    if progress:
        progress(f"{len(jobs)} JIT modules ready in {time.perf_counter() - t0:.1f}s ({len(errors)} failed)")
    return errors


class _CountingModule:
    """A JIT module whose ``launch`` bumps a counter of a LaunchCounter when it returns (a call that
    its argument checks refuse raises before any kernel is launched, and is not counted)."""

    def __init__(self, inner, owner, counter: str):
        self._inner, self._owner, self._counter = inner, owner, counter

    def launch(self, *a, **k):
        out = self._inner.launch(*a, **k)
        setattr(self._owner, self._counter, getattr(self._owner, self._counter) + 1)
        return out

    def __getattr__(self, name):
        return getattr(self._inner, name)


class LaunchCounter:
    """Counts launches of both JIT modules by wrapping their ``_jit_*_module`` factories (whatever
    Python path reaches them) and, for good measure, calls of the ring's entry point ``_decode_gather_jit``."""

    def __init__(self, decode_gather, fast_index_copy):
        self.ring_module, self.upstream_module = decode_gather, fast_index_copy  # the counts have the short names
        self.decode_gather = self.upstream = self.decode_gather_jit_calls = 0
        self._saved: list[tuple[Any, str, Any]] = []

    def _wrap_factory(self, mod, attr: str, counter: str) -> None:
        if not hasattr(mod, attr):
            return
        orig = getattr(mod, attr)
        owner = self

        def factory(*a, **k):
            m = orig(*a, **k)
            # unwrap first: nested factories, or a wrapper an lru cache kept from an earlier counter
            while isinstance(m, _CountingModule):
                m = m._inner
            return _CountingModule(m, owner, counter)

        for name in ("cache_info", "cache_clear"):
            if hasattr(orig, name):
                setattr(factory, name, getattr(orig, name))
        self._saved.append((mod, attr, orig))
        setattr(mod, attr, factory)

    def __enter__(self) -> LaunchCounter:
        try:
            return self._install()
        except BaseException:  # nothing half-installed outlives a failed enter
            self.__exit__()
            raise

    def _install(self) -> LaunchCounter:
        # the lru-cached factories and the loader under them (a module cached by a caller at
        # construction still goes through one of these first); a module is wrapped once
        for attr in (TMA_FACTORY, f"load_{TMA_FACTORY}"):
            self._wrap_factory(self.ring_module, attr, "decode_gather")
        self._wrap_factory(self.upstream_module, UPSTREAM_FACTORY, "upstream")
        orig = self.ring_module._decode_gather_jit
        owner = self

        @functools.wraps(orig)
        def spy(*a, **k):
            owner.decode_gather_jit_calls += 1
            return orig(*a, **k)

        self._saved.append((self.ring_module, "_decode_gather_jit", orig))
        self.ring_module._decode_gather_jit = spy
        return self

    def __exit__(self, *exc) -> None:
        for mod, attr, orig in reversed(self._saved):
            setattr(mod, attr, orig)
        self._saved.clear()

    def reset(self) -> None:
        self.decode_gather = self.upstream = self.decode_gather_jit_calls = 0


def call_tma(decode_gather, cache: SlotCache, src_ptrs, dst, src, num, ring: Ring | None = None) -> None:
    """The ring's entry point (``_decode_gather_jit``, private to the series: the switch is its API) on
    ``cache``'s descriptor; ``ring`` None takes the module defaults."""
    kw = ring.kwargs() if ring is not None else {}
    decode_gather._decode_gather_jit(cache.dst_ptrs, src_ptrs, cache.feat, dst, src, num, **kw)


def call_upstream(fast_index_copy, cache: SlotCache, src_ptrs, dst, src, num,
                  blocks_per_bank: int = UPSTREAM_BLOCKS_PER_BANK) -> None:  # fmt: skip
    """Upstream's kernel on the same descriptor (the cache's default grid: 1024 x 8 per bank)."""
    kw = {"num_threads": UPSTREAM_THREADS, "blocks_per_bank": blocks_per_bank}
    fast_index_copy.fast_index_copy_multi_jit(cache.dst_ptrs, src_ptrs, cache.feat, dst, src, num, **kw)
