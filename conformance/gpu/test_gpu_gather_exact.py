"""decode_gather byte-exact on the NVFP4 six-bank geometry, for EVERY miss count 0..600.

Reference: torch indexing of the device copies of the banks (never a kernel under test). Before
every call the slot cache is poisoned (a cycle of fixed bytes and random bytes); after it the WHOLE
slot cache is compared: the written rows against the reference, every other slot against the poison,
and the canaries before and after every bank's slot cache must be intact.
"""

from __future__ import annotations

import random

import pytest

from suite.geometry import MODEL, NVFP4_EXPERT_BYTES, NVFP4_ROW_BYTES, OPT_IN_RINGS
from gpukit.launch import call_tma, call_upstream
from gpukit.memory import HostBanks, MissList, SlotCache, check_slot_cache, poison_value, random_misses

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

SLOTS = 640
CAPACITY = 600
EXPERTS = MODEL["experts"]
REFILL_EVERY = 50  # fresh random bank bytes per batch of this many counts


@pytest.fixture(scope="module")
def nvfp4(gpu):
    """One layer of the nvfp4 banks (256 experts, 1,781,760 B each) and a 640-slot guarded cache."""
    banks = HostBanks(1, EXPERTS, NVFP4_ROW_BYTES, gpu.device, seed=1)
    cache = SlotCache(SLOTS, NVFP4_ROW_BYTES, gpu.device)
    yield banks, cache
    banks.close()


def _run_and_check(gpu, banks, cache, dst_idx, src_idx, num, poison, writes, what, ring=None):
    cache.poison(poison)
    call_tma(gpu.decode_gather, cache, banks.src_ptrs[0], dst_idx, src_idx, num, ring)
    err = check_slot_cache(cache, poison, writes)
    assert err is None, f"{what}: {err}"


def test_nvfp4_geometry_is_the_proposal_shape():
    assert NVFP4_ROW_BYTES == [1048576, 131072, 4096, 524288, 65536, 8192]
    assert NVFP4_EXPERT_BYTES == 1781760


# the module default with both index widths, and every opt-in ring (past 48 KiB of shared memory)
EVERY_COUNT = [("default", "int32"), ("default", "int64"), *((str(r), "int32") for r in OPT_IN_RINGS)]


@pytest.mark.parametrize("ring_tag, index_dtype", EVERY_COUNT)
def test_every_miss_count_0_to_600(gpu, nvfp4, tally, ring_tag, index_dtype):
    banks, cache = nvfp4
    ring = None if ring_tag == "default" else gpu.rings[ring_tag]
    rng = random.Random(f"every-count-{index_dtype}" + ("" if ring is None else f"-{ring_tag}"))
    misses = MissList(CAPACITY, index_dtype, gpu.device)
    tally.note("pinned", banks.buf.describe())
    for n in range(CAPACITY + 1):
        if n % REFILL_EVERY == 0:
            banks.fill(seed=rng.randrange(1 << 31))
        dst, src = random_misses(rng, CAPACITY, n, SLOTS, EXPERTS)
        misses.set(dst, src, n)
        _run_and_check(
            gpu,
            banks,
            cache,
            misses.dst,
            misses.src,
            misses.num,
            poison_value(n, rng),
            [(dst[:n], src[:n], banks.dev[0])],
            f"ring {ring_tag} n={n} {index_dtype}",
            ring,
        )
        tally(1, n * banks.bytes_per_expert)


@pytest.mark.parametrize("n", [0, 1, 2, 17, 255, 256, None])
def test_src_indices_none_copies_source_row_i(gpu, nvfp4, tally, n):
    """``src_indices=None``: entry i copies source row i; ``num_indices=None``: all L entries."""
    banks, cache = nvfp4
    rng = random.Random(f"src-none-{n}")
    capacity = EXPERTS
    misses = MissList(capacity, "int32", gpu.device)
    count = capacity if n is None else n
    dst, _ = random_misses(rng, capacity, count, SLOTS, EXPERTS)
    misses.set(dst, list(range(capacity)), count)
    num = None if n is None else misses.num
    _run_and_check(
        gpu,
        banks,
        cache,
        misses.dst,
        None,
        num,
        poison_value(count, rng),
        [(dst[:count], list(range(count)), banks.dev[0])],
        f"src_indices=None n={n}",
    )
    tally(1, count * banks.bytes_per_expert)


@pytest.mark.parametrize("src_none", [False, True], ids=["src_indices", "src_none"])
@pytest.mark.parametrize("num", [65, 164, 1 << 31, 1 << 62])
def test_device_count_above_capacity_copies_exactly_capacity(gpu, nvfp4, tally, num, src_none):
    """A device count above the index capacity L copies exactly L rows: the index buffers are views
    into larger buffers whose tail names a trap slot that must stay poisoned, and the canaries
    around every bank must survive."""
    banks, cache = nvfp4
    capacity, trap = 64, SLOTS - 1
    rng = random.Random(f"clamp-{num}-{src_none}")
    misses = MissList(capacity, "int64", gpu.device, trap_slot=trap, trap_row=EXPERTS - 1)
    dst, src = random_misses(rng, capacity, capacity, SLOTS, EXPERTS, forbid_slot=trap)
    if src_none:
        src = list(range(capacity))
    misses.set(dst, src, 0)
    misses.num.fill_(num)
    _run_and_check(
        gpu,
        banks,
        cache,
        misses.dst,
        None if src_none else misses.src,
        misses.num,
        0xA5,
        [(dst, src, banks.dev[0])],
        f"num={num} > capacity {capacity}",
    )
    assert misses._dst_full[capacity:].eq(trap).all(), "the kernel wrote into the index buffer"
    tally(1, capacity * banks.bytes_per_expert)


@pytest.mark.parametrize("num", [-1, -600, -(1 << 62)])
def test_negative_device_count_copies_nothing(gpu, nvfp4, tally, num):
    banks, cache = nvfp4
    rng = random.Random(f"negative-{num}")
    misses = MissList(CAPACITY, "int32", gpu.device)
    dst, src = random_misses(rng, CAPACITY, CAPACITY, SLOTS, EXPERTS)
    misses.set(dst, src, 0)
    misses.num.fill_(num)
    _run_and_check(gpu, banks, cache, misses.dst, misses.src, misses.num, 0x5A, [], f"num={num}")
    tally(1, 0)


def test_upstream_kernel_agrees_on_the_same_calls(gpu, nvfp4, tally):
    """Control: upstream's fast_index_copy_multi on a few counts against the same reference, so a
    reference bug cannot pass both kernels silently."""
    banks, cache = nvfp4
    rng = random.Random("upstream-control")
    misses = MissList(CAPACITY, "int32", gpu.device)
    for n in (0, 1, 2, 8, 64, 600):
        dst, src = random_misses(rng, CAPACITY, n, SLOTS, EXPERTS)
        misses.set(dst, src, n)
        cache.poison(0xA5)
        call_upstream(gpu.fast_index_copy, cache, banks.src_ptrs[0], misses.dst, misses.src, misses.num)
        err = check_slot_cache(cache, 0xA5, [(dst[:n], src[:n], banks.dev[0])])
        assert err is None, f"upstream n={n}: {err}"
        tally(1, n * banks.bytes_per_expert, kernel="upstream")
