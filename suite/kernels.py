"""The one vocabulary: the switch, its words (docs/decode-gather.md), the kernels' own names, and the words for
what is measured, one per thing (documents, pages, ``--help`` and docstrings use no other):

    kernel          one timed thing, by its :class:`Kernel` word: ``upstream`` (fast_index_copy_multi, the switch
                    unset), ``upstream_aa`` (the same a second time: the A/A control), ``tma`` (the series'
                    decode_gather ring; ``tma_<ring>`` at another ring), ``auto`` (the kernel ``ft bench bw``'s
                    profile picked for the GPU), ``copy_engine`` (a cudaMemcpyAsync of the bytes: the ceiling)
    ratio           base time / kernel time (of rates: kernel / base); > 1: the kernel is faster
    A/A spread      the largest per-round |base / A/A control - 1| of the same rounds (``aa_spread``)
    repeats' range  the larger (max - min) / median of two kernels' fresh-process repeats (``repeat_range``)
    verdict         one of :data:`VERDICTS`, by a rule of :mod:`suite.stats`
    ring            ``<ctas>x<stages>x<chunk_bytes>``, as ``FREETOKEN_DECODE_GATHER_RING`` spells it and every
                    ``--rings`` takes it (:meth:`suite.geometry.Ring.parse`)

A :class:`Kernel` is a ``str`` (its word), the key of every per-kernel map a document holds. What a kernel
launches with is a field, never part of a label: :class:`Launch` (the ring of ``tma``, the blocks per bank
of ``upstream``), read from the switch's launcher by :func:`launched`. Stdlib only.
"""

from __future__ import annotations

import dataclasses
import enum
from typing import Any

from suite.geometry import Ring

#: The switch (unset: upstream; ``tma``, ``auto``) and its ring override (``<ctas>x<stages>x<chunk_bytes>``).
SWITCH_ENV = "FREETOKEN_DECODE_GATHER"
RING_ENV = SWITCH_ENV + "_RING"
#: The kernels' own names (JIT modules, profiler traces, the caches' logs): upstream's and the series'.
UPSTREAM_KERNEL = "fast_index_copy_multi"
TMA_KERNEL = "decode_gather"
#: The attributes of freetoken's kernel modules that build (and cache) each kernel's JIT module.
UPSTREAM_FACTORY = f"_jit_{UPSTREAM_KERNEL}_module"
TMA_FACTORY = f"{TMA_KERNEL}_module"


class Kernel(str, enum.Enum):
    UPSTREAM = "upstream"
    UPSTREAM_AA = "upstream_aa"
    TMA = "tma"
    AUTO = "auto"
    COPY_ENGINE = "copy_engine"

    def __str__(self) -> str:
        return self.value

    @property
    def env(self) -> dict[str, str]:
        """The switch as this kernel's cache is built with it (upstream: unset)."""
        return {SWITCH_ENV: self.value} if self in (Kernel.TMA, Kernel.AUTO) else {}


VERDICTS = ("faster", "tie", "slower", "n/a")
#: the paired rounds' roles: the base every kernel is compared with, and its A/A control
BASE, AA = Kernel.UPSTREAM, Kernel.UPSTREAM_AA


@dataclasses.dataclass(frozen=True)
class Launch:
    """A kernel and what it launches with: the ring of ``tma``, the blocks per bank of ``upstream``."""

    kernel: Kernel
    ring: Ring | None = None
    blocks_per_bank: int | None = None

    @property
    def grid(self) -> dict[str, Any]:
        """The launch shape as the documents keep it: ``{ctas, stages, chunk_bytes}`` or ``{blocks_per_bank}``."""
        return self.ring._asdict() if self.ring is not None else {"blocks_per_bank": self.blocks_per_bank}


def launched(launch: Any, default_blocks_per_bank: int | None) -> Launch:
    """What a launcher of the switch runs (``cache._decode_miss_copy``): a partial of the series' kernel's entry
    with its ring's ``ctas``, ``stages``, ``chunk_bytes``, or of upstream's with its ``blocks_per_bank``; None:
    the cache's own upstream kernel at ``default_blocks_per_bank``."""
    keywords = getattr(launch, "keywords", None) or {}
    if launch is not None and {"ctas", "stages", "chunk_bytes"} <= set(keywords):
        return Launch(Kernel.TMA, ring=Ring(keywords["ctas"], keywords["stages"], keywords["chunk_bytes"]))
    if launch is not None and "blocks_per_bank" not in keywords:
        raise ValueError(f"launcher {launch!r}: neither a {TMA_KERNEL} ring nor a {UPSTREAM_KERNEL} grid")
    return Launch(Kernel.UPSTREAM, blocks_per_bank=keywords.get("blocks_per_bank", default_blocks_per_bank))
