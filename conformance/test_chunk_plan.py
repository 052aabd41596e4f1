"""Property tests of decode_gather's chunk plan, on the model in chunk_plan.py (the ring's own: test_tma_ring.py).

The model mirrors decode_gather.cuh statement by statement (test_model_tracks_the_kernel_source
holds it to the installed kernel); these tests check what that code does for every call shape:

* every byte of every (bank, row < n) is copied exactly once (interval arithmetic), each chunk
  inside one row, 0 < size <= chunk_bytes, whole 16-byte units;
* the CTAs' loads are within one chunk of each other, each CTA's chunks go k = cta, cta+ctas, ...;
* the incremental cursor agrees with the closed form row = k // cpr, j = k % cpr;
* the ring (any stages) stores each chunk exactly once, in order, with no stage reused before its
  store has read it, no wait on a wrong mbarrier phase, nothing in flight at exit;
* the sub-sm_90 warp copy covers each 16-byte unit of a chunk exactly once.

The negative controls break the model on purpose (off-by-one row step, missing row carry, bank
scan off by one, ring refill/phase/wait bugs) and assert the same checkers catch each one.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from conformance import chunk_plan as cp
from conformance import tma_ring as ring

NVFP4_FEAT = [1048576, 131072, 4096, 524288, 65536, 8192]  # one NVFP4 expert's banks, bytes per row
MAX_CHUNKS_PER_ROW = 4096  # keeps huge rows with tiny chunks out of the 2-core CI's way
MAX_TOTAL_CHUNKS = 12_000  # per example: bounds n for big rows

PROPERTY_SETTINGS = settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)


@st.composite
def gather_calls(draw):
    """(feat_bytes, length, num_indices, ctas, stages, chunk_bytes) of one decode_gather call."""
    num_banks = draw(st.integers(1, cp.K_MAX_BANKS))
    tiny = st.integers(1, 64).map(lambda u: 16 * u)  # 16 B .. 1 KiB
    row_bytes = st.one_of(
        st.just(0),  # a zero-byte placeholder bank
        tiny,
        st.integers(1, 4096).map(lambda u: 16 * u),  # .. 64 KiB
        st.integers(65536, 70000).map(lambda u: 16 * u),  # 1 MiB .. 1.07 MiB (> 1 MiB)
        st.sampled_from(NVFP4_FEAT),
    )
    if draw(st.sampled_from([False] * 4 + [True])):  # a call of small rows only: many misses, many rows per CTA
        row_bytes = st.one_of(st.just(0), tiny)
    feat = draw(st.lists(row_bytes, min_size=num_banks, max_size=num_banks))
    min_units = max(1, -(-sum(feat) // (16 * MAX_CHUNKS_PER_ROW)))
    nice = [u for u in (1, 2, 16, 256, 512, 1024, 4096) if u >= min_units]
    chunk_units = draw(st.one_of(st.sampled_from(nice), st.integers(min_units, 4096)) if nice else st.integers(min_units, 4096))
    chunk_bytes = 16 * chunk_units  # 16 B .. 64 KiB
    cpr = sum(-(-f // chunk_bytes) for f in feat)
    max_rows = 600 if cpr == 0 else max(1, min(600, MAX_TOTAL_CHUNKS // cpr))
    # hypothesis leans towards the first option of a choice: list the common case first
    length = draw(st.sampled_from(["some"] * 7 + ["max"] * 2 + ["zero"]).flatmap(
        lambda pick: st.integers(1, max_rows) if pick == "some" else st.just(max_rows if pick == "max" else 0)
    ))
    num_indices = draw(st.sampled_from(["in range"] * 5 + ["all"] * 3 + ["out of range"] * 2).flatmap(
        lambda pick: st.integers(min(1, length), length) if pick == "in range"
        else st.none() if pick == "all"
        else st.sampled_from([length + 1, 10**12, -1, -(10**12)])
    ))
    ctas = draw(st.integers(1, 64))
    stages = draw(st.integers(2, 8))
    return feat, length, num_indices, ctas, stages, chunk_bytes


def _expected_rows(length: int, num_indices: int | None) -> int:
    if num_indices is None:
        return length
    return min(max(num_indices, 0), length)


# --------------------------------------------------------------------------------------------
# properties
# --------------------------------------------------------------------------------------------


@PROPERTY_SETTINGS
@given(gather_calls())
def test_plan_covers_every_byte_once_balanced_and_in_order(call):
    feat, length, num_indices, ctas, stages, chunk_bytes = call
    n = _expected_rows(length, num_indices)
    plans = cp.plan(feat, num_indices, ctas, chunk_bytes, length=length)
    assert cp.plan_problems(feat, n, ctas, chunk_bytes, plans) == []
    cpr = sum(-(-f // chunk_bytes) for f in feat)
    assert sum(len(p) for p in plans) == n * cpr
    # each CTA's chunks through the ring: every one stored exactly once, in order
    for chunks in plans:
        assert ring.simulate_ring(chunks, stages) == chunks


@PROPERTY_SETTINGS
@given(gather_calls())
def test_incremental_cursor_matches_the_direct_formula(call):
    feat, length, num_indices, ctas, _stages, chunk_bytes = call
    table = cp.build_bank_table(feat, chunk_bytes)
    plans = cp.plan(feat, num_indices, ctas, chunk_bytes, length=length)
    assert cp.cursor_vs_direct_problems(table, chunk_bytes, ctas, plans) == []


@settings(max_examples=60, deadline=None)
@given(length=st.integers(0, 50), v=st.one_of(st.none(), st.integers(-(2**62), 2**62)))
def test_miss_count_is_clamped_to_the_index_capacity(length, v):
    n = cp.clamp_count(length, v)
    assert 0 <= n <= length
    assert n == _expected_rows(length, v)


# --------------------------------------------------------------------------------------------
# explicit cases
# --------------------------------------------------------------------------------------------


def test_nvfp4_expert_one_miss_16_ctas_8k_chunks():
    chunk = 8192
    plans = cp.plan(NVFP4_FEAT, 1, 16, chunk)
    assert sum(len(p) for p in plans) == 218  # 128 + 16 + 1 + 64 + 8 + 1
    assert [len(p) for p in plans] == [14] * 10 + [13] * 6
    assert cp.plan_problems(NVFP4_FEAT, 1, 16, chunk, plans) == []
    table = cp.build_bank_table(NVFP4_FEAT, chunk)
    assert table.first_chunk == (0, 128, 144, 145, 209, 217, 218, 218, 218)
    by_k = {c.k: c for p in plans for c in p}
    assert (by_k[128].bank, by_k[128].offset, by_k[128].size) == (1, 0, 8192)
    assert (by_k[144].bank, by_k[144].offset, by_k[144].size) == (2, 0, 4096)  # the 4 KiB bank: one short chunk
    assert (by_k[217].bank, by_k[217].offset, by_k[217].size, by_k[217].cta) == (5, 0, 8192, 217 % 16)
    # the 1 MiB bank is spread evenly: 8 of its 128 chunks on every CTA
    assert all(sum(1 for c in p if c.bank == 0) == 8 for p in plans)
    for chunks in plans:
        assert ring.simulate_ring(chunks, 4) == chunks


def test_zero_byte_banks_and_zero_misses_copy_nothing():
    assert cp.plan([0, 0, 0], 5, 16, 8192) == [[] for _ in range(16)]
    assert cp.plan([4096, 4096], 0, 16, 8192) == [[] for _ in range(16)]
    assert cp.plan([4096, 4096], -7, 16, 8192, length=9) == [[] for _ in range(16)]
    # placeholders between real banks are skipped by the bank scan
    plans = cp.plan([0, 32, 0, 0, 48, 0], 2, 3, 16)
    assert cp.plan_problems([0, 32, 0, 0, 48, 0], 2, 3, 16, plans) == []
    assert {c.bank for p in plans for c in p} == {1, 4}


def test_more_ctas_than_chunks_leaves_the_rest_idle():
    plans = cp.plan([16, 16], 1, 64, 16)
    assert [len(p) for p in plans] == [1, 1] + [0] * 62


def test_rejects_what_the_kernel_rejects():
    for feat, chunk in (([], 16), ([16] * 9, 16), ([8], 16), ([-16], 16), ([16], 8), ([16], 1 << 20)):
        with pytest.raises(cp.ModelError):
            cp.plan(feat, 1, 4, chunk)


def test_model_tracks_the_kernel_source(decode_gather_header):
    """Each device statement the model mirrors is still in the installed decode_gather.cuh."""
    missing = cp.missing_anchors(decode_gather_header.read_text())
    if missing:
        pytest.fail(
            "decode_gather.cuh no longer has these statements that conformance/chunk_plan.py mirrors; "
            "re-check the model against the kernel, then update KERNEL_SOURCE_ANCHORS:\n  " + "\n  ".join(missing),
            pytrace=False,
        )


def test_source_anchor_check_can_fail(decode_gather_header):
    text = decode_gather_header.read_text().replace("j -= chunks_per_row;", "j -= chunks_per_row - 1;")
    assert cp.missing_anchors(text), "an edited cursor went unnoticed by the anchor check"


# --------------------------------------------------------------------------------------------
# negative controls: deliberately broken models must be caught by the same checkers
# --------------------------------------------------------------------------------------------


class RowStepOffByOne(cp.ChunkCursor):
    def __init__(self, *args):
        super().__init__(*args)
        self.row_step += 1


class NoRowCarry(cp.ChunkCursor):
    def advance(self):
        self.row += self.row_step
        self.j += self.j_step
        if self.j >= self.chunks_per_row:
            self.j -= self.chunks_per_row  # forgot ++row


class BankScanOffByOne(cp.ChunkCursor):
    def bank_of(self, j):
        b = 0
        while j > self.table.first_chunk[b + 1]:
            b += 1
        return b


BROKEN_CASES = [
    (NVFP4_FEAT, 3, 16, 8192),
    ([4096, 0, 65536, 16], 7, 5, 4096),
    ([1048576, 16], 3, 7, 65536),
    ([32, 48], 40, 3, 16),
]


@pytest.mark.parametrize("cursor_cls", [RowStepOffByOne, NoRowCarry, BankScanOffByOne], ids=lambda c: c.__name__)
def test_broken_cursor_is_caught(cursor_cls):
    caught = 0
    for feat, n, ctas, chunk in BROKEN_CASES:
        try:
            plans = cp.plan(feat, n, ctas, chunk, cursor_cls=cursor_cls)
        except cp.ModelError:  # read an unwritten bank: also a defect the model reports
            caught += 1
            continue
        if cp.plan_problems(feat, n, ctas, chunk, plans):
            caught += 1
    assert caught == len(BROKEN_CASES), (
        f"{cursor_cls.__name__} slipped past the coverage checker in {len(BROKEN_CASES) - caught} of {len(BROKEN_CASES)} cases"
    )


def test_broken_cursor_disagrees_with_the_direct_formula():
    table = cp.build_bank_table(NVFP4_FEAT, 8192)
    plans = cp.plan(NVFP4_FEAT, 3, 16, 8192, cursor_cls=NoRowCarry)
    assert cp.cursor_vs_direct_problems(table, 8192, 16, plans)


def test_unbalanced_or_reordered_plans_are_caught():
    plans = cp.plan(NVFP4_FEAT, 1, 16, 8192)
    moved = [list(p) for p in plans]
    moved[15].append(moved[0].pop())  # same bytes: CTA 0 carries 13, CTA 15 14 (still balanced)
    moved[15].append(moved[1].pop())  # CTA 15 carries 15, CTA 1 13: unbalanced
    assert any("unbalanced" in p for p in cp.plan_problems(NVFP4_FEAT, 1, 16, 8192, moved))
    swapped = [list(p) for p in plans]
    swapped[3][0], swapped[3][1] = swapped[3][1], swapped[3][0]
    assert any("order" in p for p in cp.plan_problems(NVFP4_FEAT, 1, 16, 8192, swapped))
    doubled = [list(p) for p in plans]
    doubled[2].append(doubled[2][0])
    assert any("twice" in p for p in cp.plan_problems(NVFP4_FEAT, 1, 16, 8192, doubled))
