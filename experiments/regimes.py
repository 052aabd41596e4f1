"""The probe-only parts of the decode regime (gpukit.decode_regime): its split and touch labels, and the
banks on 2 MiB pages. No verdict is taken from any of them; they say where the fresh rows' cost sits."""

from __future__ import annotations

import logging
import mmap
from typing import Callable

from gpukit.decode_regime import Footprint, ModelBanks, RegimeGraphs
from suite.geometry import REGIMES
from suite.geometry import align_up
from gpukit.runtime import host_register, host_unregister

logger = logging.getLogger(__name__)

#: Halves of the decode regime: a new list of host rows before every replay into the same slots
#: (``decode_src``), or the same rows into new slots (``decode_dst``): {label: what the next list renews}.
SPLIT_REGIMES = {"decode_src": {"slots": False}, "decode_dst": {"rows": False}}
#: The decode regime with the next list's host rows touched before the replay, outside the timed
#: region: 16 bytes at every ``stride``-aligned address of each row (experiments.harness.page_toucher).
#: Which stride brings the cold rows down to the replayed list's time says at what granularity the
#: cost is paid.
TOUCH_REGIMES = {"decode_touch4K": 4096, "decode_touch64K": 64 << 10, "decode_touch2M": 2 << 20}
#: every regime a probe row may carry, in table order
REGIME_ORDER = REGIMES + tuple(SPLIT_REGIMES) + tuple(TOUCH_REGIMES)


class ProbeGraphs(RegimeGraphs):
    """:class:`gpukit.decode_regime.RegimeGraphs` that also times the split regimes."""

    regimes = REGIMES + tuple(SPLIT_REGIMES)

    def advance(self, regime: str) -> None:
        if regime in SPLIT_REGIMES:
            self.next_list(**SPLIT_REGIMES[regime])
        else:
            super().advance(regime)


HUGE_PAGE = 2 << 20
#: Bank backings of the decode-regime banks (gpukit.decode_regime.ModelBanks, :func:`model_banks`): FreeToken's own
#: ``HostBank`` (lazy shared anonymous mmap on 4 KiB pages), or 2 MiB pages through THP or hugetlbfs.
BACKINGS = ("hostbank", "thp", "hugetlb")
_MAP_HUGETLB = getattr(mmap, "MAP_HUGETLB", 0x40000)  # Linux value where Python lacks the name


class HugePageBank:
    """One host bank of ``nbytes`` on 2 MiB pages, filled through ``tensor`` and then ``pin()``-ed
    (FreeToken's pin-after-fill order). A 4 KiB-page bank costs the GPU one address translation per
    4 KiB of a fresh row (~435 for an NVFP4 expert); 2 MiB pages cost one or two, if the driver maps
    them as such. ``thp``: a private anonymous mmap advised MADV_HUGEPAGE, its data 2 MiB-aligned
    (needs ``/sys/kernel/mm/transparent_hugepage/enabled`` = madvise or always); ``hugetlb``: a
    MAP_HUGETLB mapping (needs ``vm.nr_hugepages``; mmap fails with ENOMEM otherwise)."""

    def __init__(self, nbytes: int, backing: str):
        import torch

        if backing not in ("thp", "hugetlb"):
            raise ValueError(f"backing={backing!r}: expected thp or hugetlb")
        self.nbytes, self.backing = int(nbytes), backing
        self.span = align_up(max(self.nbytes, 1), HUGE_PAGE)
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS
        if backing == "hugetlb":
            self._mm = mmap.mmap(-1, self.span, flags=flags | _MAP_HUGETLB)
        else:  # one spare huge page, so the data can start on a 2 MiB boundary
            self._mm = mmap.mmap(-1, self.span + HUGE_PAGE, flags=flags)
            self._mm.madvise(mmap.MADV_HUGEPAGE)
        full = torch.frombuffer(self._mm, dtype=torch.uint8)
        start = align_up(full.data_ptr(), HUGE_PAGE) - full.data_ptr()
        self.tensor = full[start : start + self.nbytes]
        self._registered: int | None = None

    def pin(self) -> None:
        base = self.tensor.data_ptr()
        host_register(base, self.span, self.backing)
        self._registered = base

    def unpin(self) -> None:
        if self._registered is not None:
            host_unregister(self._registered)
            self._registered = None


def huge_pages_in_use() -> dict[str, int]:
    """Bytes of transparent and hugetlbfs huge pages the kernel reports in use (``/proc/meminfo``)."""
    info: dict[str, int] = {}
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                key, _, rest = line.partition(":")
                info[key] = int(rest.split()[0])
    except OSError:
        return {}
    size = info.get("Hugepagesize", 0) * 1024
    return {
        "anon_huge_bytes": info.get("AnonHugePages", 0) * 1024,
        "hugetlb_used_bytes": (info.get("HugePages_Total", 0) - info.get("HugePages_Free", 0)) * size,
    }


def thp_settings() -> dict[str, str]:
    """The kernel's THP policy, e.g. ``{"enabled": "always [madvise] never", ...}`` (empty off Linux)."""
    out = {}
    for key in ("enabled", "defrag", "shmem_enabled"):
        try:
            with open(f"/sys/kernel/mm/transparent_hugepage/{key}") as f:
                out[key] = f.read().strip()
        except OSError:
            pass
    return out


def model_banks(fp: Footprint, device, backing: str = "hostbank", *, progress: Callable[[str], None] = logger.info):
    """``(ModelBanks, pages)``: the decode regime's banks on ``backing``, and what the kernel reports of
    them: its THP policy and the huge-page bytes these banks added (0 on 4 KiB pages)."""
    if backing not in BACKINGS:
        raise ValueError(f"backing={backing!r}: expected one of {', '.join(BACKINGS)}")
    make = None if backing == "hostbank" else (lambda experts, row: HugePageBank(experts * row, backing))
    before = huge_pages_in_use()
    banks = ModelBanks(fp, device, make_bank=make, backing=backing, progress=progress)
    after = huge_pages_in_use()
    return banks, {"backing": backing, "thp": thp_settings(), **{k: after.get(k, 0) - before.get(k, 0) for k in after}}
