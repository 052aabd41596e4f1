"""The shapes everything is measured on: the model, its NVFP4 banks, the ring, the edge-case rows.

Vocabulary
----------
bank        one of the expert's weight arrays (NVFP4: 6 banks per expert), one row per expert
row_bytes   bytes of one expert's row in a bank (multiple of 16)
source      a layer's host bank, ``[experts, row_bytes]`` uint8 in pinned, GPU-mapped host memory
slot cache  the VRAM copy, ``[slots, row_bytes]`` per bank
miss list   ``dst_indices[i] <- src_indices[i]`` for ``i < n`` (``n`` read on the device)
ring        decode_gather's ``(ctas, stages, chunk_bytes)`` template configuration

Pure Python: the report and the CPU tests import it without torch.
"""

from __future__ import annotations

import argparse
import dataclasses
import math
from typing import NamedTuple

#: The benchmark's regimes, in table order: ``decode`` (full-footprint banks, a new miss list before every
#: replay; it decides) and ``replay`` (the same graph replayed).
REGIMES = ("decode", "replay")


def regime_key(name: str, order: tuple[str, ...] = REGIMES) -> int:
    """Table order of a regime among ``order`` (one not in it goes last)."""
    return order.index(name) if name in order else len(order)


# Qwen3.6-35B-A3B MoE: the model the decode-gather proposal was measured on.
MODEL = {"name": "Qwen3.6-35B-A3B", "hidden": 2048, "intermediate": 512, "experts": 256, "top_k": 8, "moe_layers": 40}

_ITEMSIZE = {"uint8": 1, "float8_e4m3fn": 1, "float32": 4, "bfloat16": 2, "float16": 2, "int32": 4}


@dataclasses.dataclass(frozen=True)
class BankGeom:
    """One bank of the upstream ``nvfp4`` schema (``freetoken.moe.offload_cache._BANK_SCHEMAS``)."""

    name: str
    shape: tuple[int, ...]  # per-expert row shape
    dtype: str  # torch dtype name

    @property
    def row_bytes(self) -> int:
        return math.prod(self.shape) * _ITEMSIZE[self.dtype]

    def torch_dtype(self):
        import torch

        return getattr(torch, self.dtype)


def nvfp4_banks(hidden: int = MODEL["hidden"], intermediate: int = MODEL["intermediate"]) -> list[BankGeom]:
    """The six NVFP4 banks in schema order, as ``TritonNvfp4MoEKernel.layout`` declares them:
    packed e2m1 codes (uint8), fp8-e4m3 per-16 block scales, fp32 per-output-row globals."""
    h, i = hidden, intermediate
    return [
        BankGeom("gate_up_packed", (2 * i, h // 2), "uint8"),
        BankGeom("gate_up_scale", (2 * i, h // 16), "float8_e4m3fn"),
        BankGeom("gate_up_global", (2 * i,), "float32"),
        BankGeom("down_packed", (h, i // 2), "uint8"),
        BankGeom("down_scale", (h, i // 16), "float8_e4m3fn"),
        BankGeom("down_global", (h,), "float32"),
    ]


NVFP4_ROW_BYTES: list[int] = [b.row_bytes for b in nvfp4_banks()]
NVFP4_EXPERT_BYTES: int = sum(NVFP4_ROW_BYTES)


def geometry_rows(chunk_bytes: int) -> list[int]:
    """Row sizes that hit the ring's edges: 16 B, 48 B, one chunk -16/+16/exact, 4 KiB + 16 B,
    1 MiB + 16 B and a multi-chunk row that ends 32 B into its last chunk."""
    return [16, 48, chunk_bytes - 16, chunk_bytes + 16, 4096 + 16, (1 << 20) + 16, chunk_bytes, 3 * chunk_bytes + 32]


def rows_for_bank_count(num_banks: int, chunk_bytes: int) -> list[int]:
    base = [r for r in geometry_rows(chunk_bytes) if r > 0]
    return [base[(num_banks + i) % len(base)] for i in range(num_banks)]


class RingError(ValueError, argparse.ArgumentTypeError):
    """A ring spelled otherwise (argparse prints its message as it is)."""


class Ring(NamedTuple):
    ctas: int
    stages: int
    chunk_bytes: int

    def __str__(self) -> str:
        """The ring's one spelling, ``FREETOKEN_DECODE_GATHER_RING``'s: ``<ctas>x<stages>x<chunk_bytes>``."""
        return f"{self.ctas}x{self.stages}x{self.chunk_bytes}"

    @property
    def ring_bytes(self) -> int:
        return self.stages * self.chunk_bytes

    @property
    def whole_ring_bytes(self) -> int:
        """Bytes in flight counted as the whole ring, ctas x stages x chunk_bytes (FreeToken #751's count; the
        series' ``decode_gather.whole_ring_bytes``)."""
        return self.ctas * self.stages * self.chunk_bytes

    @property
    def bytes_in_flight(self) -> int:
        """Host reads in flight in steady state: each CTA refills one stage while the others are in
        flight, so (stages - 1) chunks per CTA (384 KiB for 16x4x8192; its shared ring holds 512 KiB)."""
        return self.ctas * (self.stages - 1) * self.chunk_bytes

    def kwargs(self) -> dict[str, int]:
        return {"ctas": self.ctas, "stages": self.stages, "chunk_bytes": self.chunk_bytes}

    @classmethod
    def parse(cls, text: str) -> "Ring":
        """A ring as ``FREETOKEN_DECODE_GATHER_RING`` spells it (``str(ring)``), as every ``--rings`` takes it."""
        parts = text.lower().split("x")
        if len(parts) != 3 or not all(p.isdigit() for p in parts):
            raise RingError(f"ring {text!r}: expected <ctas>x<stages>x<chunk_bytes> in integers, e.g. 16x4x8192")
        return cls(*map(int, parts))


# Rings past the default 48 KiB of shared memory per block, which the kernel opts in to: FreeToken #751's
# 8x3x16384 (48 KiB of ring + the bank table), its sweep's best 4x4x16384 (64 KiB) and 8x4x24576 (96 KiB).
OPT_IN_RINGS = [Ring(8, 3, 16384), Ring(4, 4, 16384), Ring(8, 4, 24576)]

# Rings the conformance tier exercises besides the module default: one CTA, a 32 KiB ring of two
# 16 KiB chunks, an odd CTA count whose stride is not a multiple of the chunks per row, a 46 KiB
# ring (LARGEST_PLAIN_RING: the largest without the opt-in) and the opt-in rings.
LARGEST_PLAIN_RING = Ring(32, 2, 23 * 1024)
CONFORMANCE_EXTRA_RINGS = [Ring(1, 2, 4096), Ring(8, 2, 16384), Ring(7, 5, 2048), LARGEST_PLAIN_RING, *OPT_IN_RINGS]

UPSTREAM_THREADS = 1024
UPSTREAM_BLOCKS_PER_BANK = 8


def parse_size(text: str) -> int:
    """``64K``, ``1M``, ``2G``, ``16384`` (a trailing ``B`` allowed) in bytes."""
    t = text.strip().upper().rstrip("B")
    return int(float(t.rstrip("KMG")) * {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}.get(t[-1:], 1))


def align_up(x: int, a: int) -> int:
    return -(-x // a) * a


def fmt_bytes(n: float) -> str:
    """1024 -> '1 KiB', 1572864 -> '1.5 MiB', 1069056000 -> '1020 MiB'."""
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" or abs(n) >= 100 else f"{n:.3g} {unit}"
        n /= 1024
