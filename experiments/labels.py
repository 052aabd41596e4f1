"""The probes' kernel labels, in the switch's own words (FREETOKEN_DECODE_GATHER: ``upstream``, ``tma``,
``auto``), and the one place older probe files' labels are read in them.

A label names a kernel (``upstream``, ``tma``, ``tma_<ring>``, ...), optionally with the regime it was
timed in (``kernel@regime``) or its neighbour (``kernel|neighbour``). Probe files committed under
``experiments/results/`` before this vocabulary name upstream's kernel ``up`` (the kernel probes) or
``unset`` (the decode steps); those files are measurements and stay as they were written:
:func:`in_switch_words` renames their labels when they are read.
"""

from __future__ import annotations

from typing import Any

from suite.models.base import LEGACY_NAMES

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


#: the row loads older probe files name ``up_<load>`` (``experiments.variants.UPSTREAM_LOADS``' names):
#: :func:`upstream_load` of them; no other ``up_`` string is a label
OLD_LOADS = ("nc", "nc_l2_128", "nc_l2_256")

#: labels of older probe files -> the switch's words (``up_<load>``: :data:`OLD_LOADS`)
#: (the result documents' old names, suite.models.base.LEGACY_NAMES, and the probes' own)
OLD_LABELS = {**LEGACY_NAMES, "up": UPSTREAM, "upAA": UPSTREAM_AA, "up32": UPSTREAM_BPB32, "unsetAA": UPSTREAM_AA}


def in_switch_words(value: Any) -> Any:
    """``value`` (a probe document or a part of it) with every kernel label (a key, a list item or a
    value) in the switch's words; a ``kernel@regime`` or ``kernel|neighbour`` label keeps what follows the kernel."""
    if isinstance(value, dict):
        return {in_switch_words(k): in_switch_words(v) for k, v in value.items()}
    if isinstance(value, list):
        return [in_switch_words(v) for v in value]
    if not isinstance(value, str):
        return value
    cut = min((i for i in (value.find("@"), value.find("|")) if i >= 0), default=len(value))
    kernel, rest = value[:cut], value[cut:]
    if kernel in OLD_LABELS:
        return OLD_LABELS[kernel] + rest
    if kernel.removeprefix("up_") in OLD_LOADS:
        return upstream_load(kernel.removeprefix("up_")) + rest
    return value
