"""decode_gather byte-exact over bank counts 1..8, awkward row sizes and several rings.

Row sizes per case come from ``suite.geometry.geometry_rows(chunk)``: 16 B, 48 B, one chunk -16 / +16 /
exact, 4 KiB + 16 B, 1 MiB + 16 B and a three-chunk row ending 32 B into its last chunk, relative to
the ring's own chunk size. Every case has 3 layers whose banks are packed into ONE pinned
allocation; the last layer's last bank ends exactly at the end of that allocation (followed by an
unregistered guard page), and every miss list touches slot 0, slot S-1, expert 0 and expert E-1.
"""

from __future__ import annotations

import random

import pytest

from suite.geometry import CONFORMANCE_EXTRA_RINGS, NVFP4_ROW_BYTES, rows_for_bank_count
from gpukit.launch import call_tma
from gpukit.memory import HostBanks, MissList, SlotCache, check_slot_cache, poison_value, random_misses

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

LAYERS, EXPERTS, SLOTS = 3, 9, 13
MAX_BANKS = 8  # decode_gather.MAX_BANKS, asserted below
RING_TAGS = ["default"] + [str(r) for r in CONFORMANCE_EXTRA_RINGS]


@pytest.mark.parametrize("ring_tag", RING_TAGS)
@pytest.mark.parametrize("num_banks", range(1, MAX_BANKS + 1))
def test_bank_counts_row_sizes_and_rings(gpu, tally, ring_tag, num_banks):
    assert gpu.decode_gather.MAX_BANKS == MAX_BANKS
    ring = gpu.rings[ring_tag]
    rows = rows_for_bank_count(num_banks, ring.chunk_bytes)
    rng = random.Random(f"geometry-{ring_tag}-{num_banks}")
    banks = HostBanks(LAYERS, EXPERTS, rows, gpu.device, seed=rng.randrange(1 << 31))
    try:
        cache = SlotCache(SLOTS, rows, gpu.device, seed=rng.randrange(1 << 31))
        dtypes = ("int32", "int64") if ring_tag == "default" else ("int32",)
        for index_dtype in dtypes:
            misses = MissList(SLOTS, index_dtype, gpu.device)
            for layer in range(LAYERS):
                for n in (0, 1, 2, 5, SLOTS, SLOTS + 7):
                    count = min(n, SLOTS)
                    dst, src = random_misses(rng, SLOTS, count, SLOTS, EXPERTS)
                    misses.set(dst, src, n)
                    poison = poison_value(n + layer, rng)
                    cache.poison(poison)
                    call_tma(
                        gpu.decode_gather,
                        cache,
                        banks.src_ptrs[layer],
                        misses.dst,
                        misses.src,
                        misses.num,
                        None if ring_tag == "default" else ring,
                    )
                    err = check_slot_cache(cache, poison, [(dst[:count], src[:count], banks.dev[layer])])
                    assert err is None, f"ring {ring} rows {rows} layer {layer} n={n} {index_dtype}: {err}"
                    tally(1, count * banks.bytes_per_expert)
    finally:
        banks.close()


def test_all_eight_banks_of_one_mebibyte_plus_16(gpu, tally):
    """Eight banks of the largest row: every chunk of the default ring is a full chunk but the last."""
    rows = [(1 << 20) + 16] * 8
    rng = random.Random("eight-big")
    banks = HostBanks(1, 4, rows, gpu.device, seed=7)
    try:
        cache = SlotCache(5, rows, gpu.device)
        misses = MissList(5, "int32", gpu.device)
        for n in (1, 3, 5):
            dst, src = random_misses(rng, 5, n, 5, 4)
            misses.set(dst, src, n)
            cache.poison(0xA5)
            call_tma(gpu.decode_gather, cache, banks.src_ptrs[0], misses.dst, misses.src, misses.num)
            err = check_slot_cache(cache, 0xA5, [(dst[:n], src[:n], banks.dev[0])])
            assert err is None, f"n={n}: {err}"
            tally(1, n * banks.bytes_per_expert)
    finally:
        banks.close()


def test_source_ends_exactly_at_the_end_of_its_pinned_allocation(real_gpu, tally):
    """The last expert of the last layer's last bank is the last byte of a registered host range
    followed by an unregistered PROT_NONE page: reading it must not touch a byte past the end."""
    gpu = real_gpu
    rows = NVFP4_ROW_BYTES
    banks = HostBanks(2, 8, rows, gpu.device, seed=11)
    try:
        if not banks.ends_at_allocation_end:
            pytest.skip(f"exact-end pinned allocation unavailable here: {banks.buf.describe()}")
        cache = SlotCache(8, rows, gpu.device)
        misses = MissList(1, "int32", gpu.device)
        for ring_tag, ring in gpu.rings.items():
            misses.set([7], [7], 1)
            cache.poison(0x3C)
            call_tma(
                gpu.decode_gather,
                cache,
                banks.src_ptrs[1],
                misses.dst,
                misses.src,
                misses.num,
                None if ring_tag == "default" else ring,
            )
            err = check_slot_cache(cache, 0x3C, [([7], [7], banks.dev[1])])
            assert err is None, f"ring {ring}: {err}"
            tally(1, banks.bytes_per_expert)
        tally.note("exact_end_pinned", banks.buf.describe())
    finally:
        banks.close()
