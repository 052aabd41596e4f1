"""The probes' kernel labels, in the switch's own words (FREETOKEN_DECODE_GATHER: ``upstream``, ``tma``,
``auto``).

A label names a kernel (``upstream``, ``tma``, ``tma_<ring>``, ...), optionally with the regime it was
timed in (``kernel@regime``) or its neighbour (``kernel|neighbour``). Every probe file committed under
``experiments/results/`` names its kernels so (the older files were rewritten once; git keeps them as
measured).
"""

from __future__ import annotations

#: upstream's fast_index_copy_multi at its own 8 blocks per bank (FREETOKEN_DECODE_GATHER unset)
UPSTREAM = "upstream"
#: the same kernel timed a second time: the A/A control
UPSTREAM_AA = "upstream_aa"
#: upstream's kernel at 32 blocks per bank
UPSTREAM_BPB32 = "upstream_bpb32"
#: the series' kernel (FREETOKEN_DECODE_GATHER=tma)
TMA = "tma"


def upstream_load(name: str) -> str:
    """Upstream's kernel with another row load (an ``experiments.variants.UPSTREAM_LOADS`` name)."""
    return f"{UPSTREAM}_{name}"
