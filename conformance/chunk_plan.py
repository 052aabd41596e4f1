"""A pure-Python model of decode_gather's chunk plan, mirroring ``freetoken/kernel/csrc/jit/decode_gather.cuh``
statement by statement, so that property tests on the host can check what the GPU will do.

The kernel cuts one call -- ``n`` rows of ``B`` banks -- into chunks of at most ``chunk_bytes``, each inside one
bank row, and deals chunk ``k`` to CTA ``k % ctas``; each CTA walks its chunks with an incremental cursor (no
64-bit division per chunk) and, on sm_90+, moves them through a ``stages``-deep ring of bulk copies (the ring:
:mod:`conformance.tma_ring`, which walks this plan's chunks). The mirrors: :func:`build_bank_table` (the warp scan
of the per-bank ``first_chunk`` prefix sums), :func:`clamp_count`, :class:`ChunkCursor` (``row_step = ctas / cpr``,
``j_step = ctas % cpr``, the bank scan ``while (j >= first_chunk[b + 1]) ++b``), :func:`cta_chunks` / :func:`plan`
(the prologue's early exits, ``my_chunks``, the first chunk lane 0 issues early from the scan's registers,
:func:`early_chunk`, the cursor loop); the independent references the tests compare them
against: :func:`direct_chunk` (the closed form) and :func:`plan_problems` (interval arithmetic).
:data:`KERNEL_SOURCE_ANCHORS` lists the device statements this model and :mod:`conformance.tma_ring` mirror; a
test asserts each is still in the installed ``.cuh``, so a kernel change that the model does not follow fails
loudly instead of leaving the model checking an old kernel.
"""

from __future__ import annotations

import bisect
import dataclasses
import re
from collections import defaultdict
from typing import Sequence

K_MAX_BANKS = 8  # decode_gather::kMaxBanks
K_THREADS = 32  # decode_gather::kThreads (one warp; lane 0 drives the ring)
MAX_CHUNK_BYTES = 1 << 20  # static_assert(kChunkBytes < (1u << 20)): an mbarrier's tx count
INT32_MAX = (1 << 31) - 1


class ModelError(ValueError):
    """An input the kernel (or the host checks in front of it) does not accept."""


def _c_div(a: int, b: int) -> int:
    """C++ integer division (truncates toward zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b > 0) else -q


def _c_mod(a: int, b: int) -> int:
    return a - _c_div(a, b) * b


def _int32(value: int, what: str) -> int:
    if not -(1 << 31) <= value <= INT32_MAX:
        raise ModelError(f"{what}={value} overflows the kernel's int32")
    return value


# --- the plan -------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Chunk:
    cta: int  # the CTA that copies it (blockIdx.x)
    k: int  # row * chunks_per_row + j, from the cursor's state
    row: int  # index slot: the kernel copies src_indices[row] -> dst_indices[row]
    bank: int
    j: int  # chunk index inside the row's run of chunks (< chunks_per_row)
    offset: int  # bytes into the bank row
    size: int  # bytes

    @property
    def end(self) -> int:
        return self.offset + self.size


@dataclasses.dataclass(frozen=True)
class BankTable:
    """Shared-memory ``BankTable``: ``feat`` padded with None where the kernel never writes it."""

    feat: tuple[int | None, ...]  # kMaxBanks entries; None = uninitialised shared memory
    first_chunk: tuple[int, ...]  # kMaxBanks + 1 entries; [kMaxBanks] == chunks per row
    num_banks: int

    @property
    def chunks_per_row(self) -> int:
        return self.first_chunk[K_MAX_BANKS]


def check_chunk_bytes(chunk_bytes: int) -> None:
    """The kernel's static_asserts on kChunkBytes."""
    if chunk_bytes % 16 or chunk_bytes < 16:
        raise ModelError(f"chunk_bytes={chunk_bytes}: chunks are whole 16-byte units")
    if chunk_bytes >= MAX_CHUNK_BYTES:
        raise ModelError(f"chunk_bytes={chunk_bytes}: an mbarrier counts fewer than 2^20 transaction bytes")


def build_bank_table(feat_bytes: Sequence[int], chunk_bytes: int) -> BankTable:
    """Lanes < num_banks load the descriptor; a warp scan (``__shfl_up_sync`` by 1, 2, 4, 8) turns
    each lane's chunk count into the exclusive prefix sums that lanes 0..kMaxBanks write to
    ``first_chunk``, and lane kMaxBanks's inclusive sum is the chunks per row."""
    check_chunk_bytes(chunk_bytes)
    num_banks = len(feat_bytes)
    # host side: RuntimeCheck(num_banks in [1, kMaxBanks]); row sizes as the fused copy plan guarantees them
    if not 1 <= num_banks <= K_MAX_BANKS:
        raise ModelError(f"num_banks must be in [1, {K_MAX_BANKS}], got {num_banks}")
    for b, feat in enumerate(feat_bytes):
        if feat < 0 or feat % 16:
            raise ModelError(f"feat_bytes[{b}]={feat} must be a non-negative multiple of 16")
    # if (lane < num_banks) table.feat[lane] = p.feat_bytes[lane]
    feat = [int(feat_bytes[lane]) if lane < num_banks else None for lane in range(K_MAX_BANKS)]
    lanes = range(K_THREADS)
    bank_chunks = [  # lanes past num_banks count no chunks
        _int32(_c_div(feat[lane] + chunk_bytes - 1, chunk_bytes), "chunks of a row") if lane < num_banks else 0
        for lane in lanes
    ]
    upto = list(bank_chunks)
    d = 1
    while d <= K_MAX_BANKS:  # every lane shuffles at once: each reads lane - d's value from before this step
        below = [upto[lane - d] if lane >= d else upto[lane] for lane in lanes]
        upto = [_int32(upto[lane] + below[lane], "first_chunk") if lane >= d else upto[lane] for lane in lanes]
        d <<= 1
    first_chunk = [upto[lane] - bank_chunks[lane] for lane in range(K_MAX_BANKS + 1)]
    chunks_per_row = upto[K_MAX_BANKS]  # __shfl_sync(..., upto, kMaxBanks)
    assert first_chunk[K_MAX_BANKS] == chunks_per_row  # lane kMaxBanks >= num_banks counts 0 chunks
    return BankTable(tuple(feat), tuple(first_chunk), num_banks)


def clamp_count(length: int, valid_length: int | None) -> int:
    """``n = p.length``, or ``valid_length[0]`` clamped to ``[0, length]``."""
    v = valid_length
    return length if v is None else (0 if v < 0 else (v if v < length else length))


class ChunkCursor:
    """``ChunkCursor<IdType, kChunkBytes>``: this CTA's chunks in order, by increments."""

    def __init__(self, table: BankTable, chunk_bytes: int, first_chunk: int, ctas: int) -> None:
        cpr = table.chunks_per_row
        self.table = table
        self.chunk_bytes = chunk_bytes
        # ChunkCursor{&table, ..., first_chunk / cpr, first_chunk % cpr, cpr, kCtas / cpr, kCtas % cpr}
        self.row = _c_div(first_chunk, cpr)
        self.j = _c_mod(first_chunk, cpr)
        self.chunks_per_row = cpr
        self.row_step = _c_div(ctas, cpr)
        self.j_step = _c_mod(ctas, cpr)

    def bank_of(self, j: int) -> int:
        b = 0
        while j >= self.table.first_chunk[b + 1]:
            b += 1
        return b

    def next(self) -> tuple[int, int, int, int, int]:
        """(row, bank, j, offset, size) of the next chunk; then advance, as ``next()`` does."""
        row, j = self.row, self.j
        b = self.bank_of(j)
        feat = self.table.feat[b]
        if feat is None:
            raise ModelError(f"chunk j={j} reads bank {b}'s row size, which the kernel never wrote")
        offset = (j - self.table.first_chunk[b]) * self.chunk_bytes
        left = feat - offset
        size = left if left < self.chunk_bytes else self.chunk_bytes
        self.advance()
        return row, b, j, offset, size

    def advance(self) -> None:
        self.row += self.row_step
        self.j += self.j_step
        if self.j >= self.chunks_per_row:
            self.j -= self.chunks_per_row
            self.row += 1


def my_chunk_count(total: int, first_chunk: int, ctas: int) -> int:
    """``my_chunks = (total - first_chunk + kCtas - 1) / kCtas``."""
    return _c_div(total - first_chunk + ctas - 1, ctas)


def cta_chunks(
    table: BankTable, chunk_bytes: int, n: int, ctas: int, cta: int, *, cursor_cls: type[ChunkCursor] = ChunkCursor
) -> list[Chunk]:
    """The chunks CTA ``cta`` copies, in its order: the kernel body after the table is built."""
    if n == 0:
        return []
    cpr = table.chunks_per_row
    total = n * cpr
    first_chunk = cta  # static_cast<int32_t>(blockIdx.x)
    if first_chunk >= total:
        return []
    early = [early_chunk(table, chunk_bytes, first_chunk)] if first_chunk < cpr else []  # const bool early
    my_chunks = my_chunk_count(total, first_chunk, ctas)
    cursor = cursor_cls(table, chunk_bytes, first_chunk + len(early) * ctas, ctas)  # next = first + issued * kCtas
    return [Chunk(cta, row * cpr + j, row, bank, j, offset, size)
            for row, bank, j, offset, size in early + [cursor.next() for _ in range(my_chunks - len(early))]]  # fmt: skip


def early_chunk(table: BankTable, chunk_bytes: int, first_chunk: int) -> tuple[int, int, int, int, int]:
    """The CTA's first chunk as lane 0 plans it from the scan's registers when it lies in row 0: the owner is the
    lowest lane whose inclusive prefix ``upto`` exceeds ``first`` (``__ffs(__ballot_sync(...)) - 1``; lanes past
    the banks hold the row total), its first chunk ``upto - bank_chunks``, its ``feat`` shuffled from that lane."""
    upto = [table.first_chunk[lane + 1] if lane < K_MAX_BANKS else table.chunks_per_row for lane in range(K_THREADS)]
    owner = next(lane for lane in range(K_THREADS) if first_chunk < upto[lane])
    feat = table.feat[owner]
    if feat is None or owner >= table.num_banks:
        raise ModelError(f"chunk {first_chunk}: the ballot names lane {owner}, which holds no bank")
    offset = (first_chunk - table.first_chunk[owner]) * chunk_bytes
    left = feat - offset
    return 0, owner, first_chunk, offset, left if left < chunk_bytes else chunk_bytes


def plan(
    feat_bytes: Sequence[int],
    num_indices: int | None,
    ctas: int,
    chunk_bytes: int,
    *,
    length: int | None = None,
    cursor_cls: type[ChunkCursor] = ChunkCursor,
) -> list[list[Chunk]]:
    """Per CTA, the chunks it copies. ``length`` is the index capacity L (default: ``num_indices``);
    ``num_indices`` None copies all L rows, else it is clamped to ``[0, L]`` as on the device."""
    if ctas < 1:
        raise ModelError(f"ctas={ctas} must be >= 1")
    if length is None:
        length = max(num_indices or 0, 0)
    table = build_bank_table(feat_bytes, chunk_bytes)
    n = clamp_count(length, num_indices)
    return [cta_chunks(table, chunk_bytes, n, ctas, cta, cursor_cls=cursor_cls) for cta in range(ctas)]


def direct_chunk(table: BankTable, chunk_bytes: int, k: int) -> tuple[int, int, int, int, int]:
    """The closed form of chunk ``k``: ``row = k // cpr``, ``j = k % cpr``, bank by bisection."""
    cpr = table.chunks_per_row
    row, j = divmod(k, cpr)
    bank = bisect.bisect_right(table.first_chunk, j) - 1
    offset = (j - table.first_chunk[bank]) * chunk_bytes
    feat = table.feat[bank]
    assert feat is not None
    return row, bank, j, offset, min(chunk_bytes, feat - offset)


# --- checks (independent of the model's internals) ------------------------------------------


def plan_problems(
    feat_bytes: Sequence[int], n: int, ctas: int, chunk_bytes: int, cta_plans: Sequence[Sequence[Chunk]], *, limit: int = 20
) -> list[str]:
    """Everything wrong with ``cta_plans`` as the copy of ``n`` rows of every bank, the first ``limit`` (empty: correct).

    Coverage by interval arithmetic: per (bank, row < n) the chunks, sorted by offset, must tile
    ``[0, feat)`` exactly -- no gap, no overlap, nothing outside. Plus: every chunk in one row,
    ``0 < size <= chunk_bytes``, 16-byte multiples; CTA loads within one chunk of each other;
    each CTA's chunks are k = cta, cta + ctas, cta + 2*ctas, ... in that order.
    """
    if len(cta_plans) != ctas:
        return [f"{len(cta_plans)} CTA plans for {ctas} CTAs"]
    problems: list[str] = []
    intervals: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for cta, chunks in enumerate(cta_plans):
        for i, c in enumerate(chunks):
            where = lambda: f"CTA {cta} chunk #{i} {c}"  # noqa: E731  (a repr costs: only for a problem)
            if c.cta != cta:
                problems.append(f"{where()}: dealt to CTA {cta} but says CTA {c.cta}")
            if not 0 <= c.bank < len(feat_bytes):
                problems.append(f"{where()}: bank out of range")
                continue
            feat = feat_bytes[c.bank]
            checks = ((0 <= c.row < n, f"row {c.row} outside [0, {n})"),
                      (0 < c.size <= chunk_bytes, f"size not in (0, {chunk_bytes}]"),
                      (not (c.size % 16 or c.offset % 16), "not whole 16-byte units"),
                      (c.offset >= 0 and c.end <= feat, f"outside the {feat}-byte row"))  # fmt: skip
            problems += [f"{where()}: {why}" for ok, why in checks if not ok]
            intervals[(c.bank, c.row)].append((c.offset, c.end))
    for (bank, row), spans in intervals.items():
        pos = 0
        for start, end in sorted(spans):
            if start < pos:
                problems.append(f"bank {bank} row {row}: bytes [{start}, {min(pos, end)}) copied twice")
            if start > pos:
                problems.append(f"bank {bank} row {row}: bytes [{pos}, {start}) never copied")
            pos = max(pos, end)
        if pos < feat_bytes[bank]:
            problems.append(f"bank {bank} row {row}: bytes [{pos}, {feat_bytes[bank]}) never copied")
    problems += [f"bank {bank} row {row}: never copied" for bank, feat in enumerate(feat_bytes) if feat
                 for row in range(n) if (bank, row) not in intervals]  # fmt: skip
    counts = [len(chunks) for chunks in cta_plans]
    if counts and max(counts) - min(counts) > 1:
        problems.append(f"CTA loads unbalanced: {counts}")
    for cta, chunks in enumerate(cta_plans):
        ks, want = [c.k for c in chunks], [cta + i * ctas for i in range(len(chunks))]
        if ks != want:
            problems.append(f"CTA {cta}: chunk order k={ks[:8]}... is not {want[:8]}...")
    return problems[:limit]


def cursor_vs_direct_problems(
    table: BankTable, chunk_bytes: int, ctas: int, cta_plans: Sequence[Sequence[Chunk]], *, limit: int = 20
) -> list[str]:
    """Where the incremental cursor's chunks differ from :func:`direct_chunk` of k = cta + i*ctas."""
    problems = []
    for cta, chunks in enumerate(cta_plans):
        for i, c in enumerate(chunks):
            k = cta + i * ctas
            got, want = (c.row, c.bank, c.j, c.offset, c.size), direct_chunk(table, chunk_bytes, k)
            if got != want:
                problems.append(f"CTA {cta} chunk #{i} (k={k}): cursor {got} != direct {want}")
    return problems[:limit]


# --- the device statements this model mirrors -----------------------------------------------

KERNEL_SOURCE_ANCHORS = (
    "inline constexpr int kMaxBanks = 8;",
    "inline constexpr unsigned kThreads = 32;",
    # clamp_count
    "n = v < 0 ? 0 : (v < p.length ? v : p.length);",
    # build_bank_table
    "if (lane < static_cast<unsigned>(p.num_banks)) {",
    "const int32_t bank_chunks = lane < static_cast<unsigned>(p.num_banks) "
    "? static_cast<int32_t>((bank_feat + kChunkBytes - 1) / kChunkBytes) : 0;",
    "for (int d = 1; d <= kMaxBanks; d <<= 1) { const int32_t below = __shfl_up_sync(0xffffffffu, upto, d); "
    "if (lane >= static_cast<unsigned>(d)) { upto += below; } }",
    "if (lane <= static_cast<unsigned>(kMaxBanks)) { table.first_chunk[lane] = upto - bank_chunks; }",
    "const int32_t chunks_per_row = __shfl_sync(0xffffffffu, upto, kMaxBanks);",
    # cta_chunks
    "const int64_t total = n * chunks_per_row;",
    "if (first >= total) { return; }",
    "const int64_t my_chunks = (total - first + kCtas - 1) / kCtas;",
    "const bool early = first < chunks_per_row;",
    "const int32_t issued = early ? 1 : 0;",
    "const int32_t next = first + issued * static_cast<int32_t>(kCtas);",
    "static_cast<int64_t>(next / chunks_per_row), next % chunks_per_row, chunks_per_row, "
    "static_cast<int64_t>(static_cast<int32_t>(kCtas) / chunks_per_row), static_cast<int32_t>(kCtas) % chunks_per_row,",
    # early_chunk
    "const int owner = __ffs(__ballot_sync(0xffffffffu, first < upto)) - 1;",
    "const int32_t owner_first = __shfl_sync(0xffffffffu, upto - bank_chunks, owner);",
    "const int64_t offset = static_cast<int64_t>(first - owner_first) * kChunkBytes;",
    "smem.pending_dst[0] = reinterpret_cast<char*>(dst) + row0_dst * feat + offset;",
    "bulk_load(ring, reinterpret_cast<const char*>(src) + row0_src * feat + offset, bytes, &smem.full[0]);",
    # ChunkCursor::next
    "while (j >= table->first_chunk[b + 1]) { ++b; }",
    "const int64_t offset = static_cast<int64_t>(j - table->first_chunk[b]) * kChunkBytes;",
    "const int64_t left = feat - offset;",
    "left < static_cast<int64_t>(kChunkBytes) ? left : kChunkBytes",
    "row += row_step; j += j_step; if (j >= chunks_per_row) { j -= chunks_per_row; ++row; }",
    # RingModel.run
    "if (lane == 0) { mbar_init(&smem.full[0]); asm volatile(\"fence.proxy.async.shared::cta;\" ::: \"memory\");",
    "if (lane < kStages && !(early && lane == 0)) { mbar_init(&smem.full[lane]); }",
    "uint32_t load_stage = static_cast<uint32_t>(issued);",
    "const int64_t prologue = my_chunks < static_cast<int64_t>(kStages) ? my_chunks : kStages;",
    "for (int64_t i = issued; i < prologue; ++i) { issue(); }",
    "mbar_wait(&smem.full[stage], phase); "
    "bulk_store(smem.pending_dst[stage], ring + stage * kChunkBytes, smem.pending_bytes[stage]);",
    "if (i >= 1 && i - 1 + static_cast<int64_t>(kStages) < my_chunks) { "
    'asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory"); issue(); }',
    "if (++stage == kStages) { stage = 0; phase ^= 1; }",
    'asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");',
    "load_stage = load_stage + 1 == kStages ? 0 : load_stage + 1;",
)


def normalise_source(text: str) -> str:
    """Comments dropped and whitespace collapsed, so anchors survive reformatting."""
    text = re.sub(r"//[^\n]*", "", text)
    text = re.sub(r"/\*.*?\*/", "", text, flags=re.S)
    return re.sub(r"\s+", " ", text)


def missing_anchors(cuh_text: str) -> list[str]:
    """The :data:`KERNEL_SOURCE_ANCHORS` not found in ``cuh_text`` (whitespace-insensitive)."""
    src = normalise_source(cuh_text)
    return [a for a in KERNEL_SOURCE_ANCHORS if normalise_source(a) not in src]
