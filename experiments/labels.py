"""The probes' kernel labels, in the switch's own words (FREETOKEN_DECODE_GATHER: ``upstream``, ``tma``,
``auto``).

A label names a kernel (``upstream``, ``tma``, ``tma_<ring>``, ...), optionally with the regime it was
timed in (``kernel@regime``) or its neighbour (``kernel|neighbour``). Every probe file committed under
``experiments/results/`` names its kernels so (the older files were rewritten once; git keeps them as
measured).
"""

from __future__ import annotations

from suite.kernels import Kernel

#: upstream's kernel at 32 blocks per bank (``upstream``, ``upstream_aa`` and ``tma`` are suite.kernels.Kernel's)
UPSTREAM_BPB32 = f"{Kernel.UPSTREAM}_bpb32"


def upstream_load(name: str) -> str:
    """Upstream's kernel with another row load (an ``experiments.variants.UPSTREAM_LOADS`` name)."""
    return f"{Kernel.UPSTREAM}_{name}"
