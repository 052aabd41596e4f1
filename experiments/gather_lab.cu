// Exploration kernels for issue 52 (experiments/gather_lab.py): NOT the series' kernel.
//
// ring<...>:  a replica of the series' decode_gather ring (patches/0001, decode_gather.cuh), statement by
//             statement, with compile-time switches for the changes under test and optional %globaltimer
//             stamps per CTA. ldg<...>: a replica of upstream's fast_index_copy_multi (1024 threads x
//             kBlocksPerBank per bank) with the same stamps. clock_probe: the granularity of %globaltimer.
// Arguments are raw device addresses (unsigned long long), int32 indices, as the harness passes them.
//
// Stamps, 8 x u64 per CTA: [0] entry, [1] miss count known, [2] first load issued, [3] first load arrived,
// [4] last load arrived, [5] exit, [6] bytes this CTA copied, [7] chunks (ring) or 16-byte units (ldg);
// ring only: [8] bank table built, [9] barriers initialised and fenced, [10] lane 0's cursor ready, [11] row 0's
// ids known (after the count: the stamps wait in turn).

typedef unsigned long long ull;
typedef long long ll;

__device__ __forceinline__ ull gtime() {
    ull t;
    asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t)::"memory");
    return t;
}

// the time once `dep` has arrived: a store of it must wait for it, and the timer is read after the store
__device__ __forceinline__ void stamp_after(ull* slot, ll dep) {
    *reinterpret_cast<volatile ll*>(slot) = dep;
    *slot = gtime();
}

extern "C" __global__ void clock_probe(ull* out, int n) {
    // n consecutive reads of %globaltimer by one thread: the distinct steps show its granularity
    if (threadIdx.x == 0 && blockIdx.x == 0) {
        for (int i = 0; i < n; ++i) out[i] = gtime();
    }
}

namespace lab {

constexpr int kMaxBanks = 8;

struct BankTable {
    ll dst[kMaxBanks];
    ll src[kMaxBanks];
    ll feat[kMaxBanks];
    int first_chunk[kMaxBanks + 1];
};

template <int kStages>
struct StaticSmem {
    BankTable table;
    unsigned long long full[kStages];
    void* pending_dst[kStages];
    unsigned pending_bytes[kStages];
};

__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return static_cast<unsigned>(__cvta_generic_to_shared(p));
}
__device__ __forceinline__ void mbar_init(unsigned long long* bar) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbar_wait(unsigned long long* bar, unsigned parity) {
    asm volatile(
        "{\n.reg .pred p;\nWAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
        "@!p bra WAIT_%=;\n}\n" ::"r"(smem_addr(bar)),
        "r"(parity)
        : "memory");
}
__device__ __forceinline__ void bulk_load(void* smem, const void* src, unsigned bytes, unsigned long long* bar) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cta.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
                     smem_addr(smem)),
                 "l"(src), "r"(bytes), "r"(smem_addr(bar))
                 : "memory");
}
__device__ __forceinline__ void bulk_store(void* dst, const void* smem, unsigned bytes) {
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(smem_addr(smem)),
                 "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
}

struct Chunk {
    const void* src;
    void* dst;
    unsigned bytes;
};

// chunk k of the call (row k / cpr, chunk k % cpr of that row), its row ids given
template <int kChunk>
__device__ __forceinline__ Chunk chunk_at(const BankTable& t, int j, ll dst_row, ll src_row) {
    int b = 0;
    while (j >= t.first_chunk[b + 1]) ++b;
    const ll feat = t.feat[b];
    const ll off = static_cast<ll>(j - t.first_chunk[b]) * kChunk;
    const ll left = feat - off;
    Chunk c;
    c.src = reinterpret_cast<const char*>(t.src[b]) + src_row * feat + off;
    c.dst = reinterpret_cast<char*>(t.dst[b]) + dst_row * feat + off;
    c.bytes = static_cast<unsigned>(left < kChunk ? left : kChunk);
    return c;
}

// kReadWait: the CTA retires once its last store has READ shared memory (wait_group.read 0), as CUTLASS's
// TMA-store epilogues do, instead of waiting for the stores to complete (the grid's end orders them).
// kLanePrologue: lane s < kStages issues the CTA's s-th chunk itself (its own plan, in parallel) instead of
// lane 0 issuing all kStages in turn.
template <int kCtas, int kStages, int kChunk, bool kStamp, bool kReadWait, bool kLanePrologue, int kEarly>
__device__ __forceinline__ void ring_body(ull dst_ptrs, ull src_ptrs, ull feat_bytes, ull dst_idx, ull src_idx,
                                          ull valid_len, ll length, int num_banks, ull* stamps) {
    ull* st = stamps + 12ull * blockIdx.x;
    const unsigned lane = threadIdx.x;
    if (kStamp && lane == 0) st[0] = gtime();
    ll bank_dst = 0, bank_src = 0, bank_feat = 0;
    if (lane < static_cast<unsigned>(num_banks)) {
        bank_dst = reinterpret_cast<const ll*>(dst_ptrs)[lane];
        bank_src = reinterpret_cast<const ll*>(src_ptrs)[lane];
        bank_feat = reinterpret_cast<const ll*>(feat_bytes)[lane];
    }
    const int* di = reinterpret_cast<const int*>(dst_idx);
    const int* si = reinterpret_cast<const int*>(src_idx);
    ll v = length;
    if (valid_len) v = reinterpret_cast<const ll*>(valid_len)[0];
    ll row0_dst = 0, row0_src = 0;
    if (length > 0) {
        row0_dst = di[0];
        row0_src = si ? si[0] : 0;
    }
    const ll n = v < 0 ? 0 : (v < length ? v : length);
    if (kStamp && lane == 0) {
        stamp_after(st + 1, n);                                    // the miss count
        stamp_after(st + 11, row0_dst + row0_src);                 // row 0's ids
        stamp_after(st + 8, bank_feat + bank_src + bank_dst);      // this lane's bank entry (overwritten below)
    }
    if (n == 0) {
        if (kStamp && lane == 0) st[5] = gtime();
        return;
    }
    __shared__ __align__(8) StaticSmem<kStages> smem;
    extern __shared__ __align__(128) unsigned char ring[];
    // kEarly == 2 (fast): when the CTA's first chunk lies in bank 0 of row 0 (blockIdx.x < bank 0's chunks), lane 0
    // issues it straight from its own loads, before the bank table, the scan and the ballot
    bool fast = false;
    if (kEarly == 2 && lane == 0) {
        const ll off = static_cast<ll>(blockIdx.x) * kChunk;
        if (off < bank_feat) {
            fast = true;
            mbar_init(&smem.full[0]);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            const ll left = bank_feat - off;
            const unsigned bytes = static_cast<unsigned>(left < kChunk ? left : kChunk);
            smem.pending_dst[0] = reinterpret_cast<char*>(bank_dst) + row0_dst * bank_feat + off;
            smem.pending_bytes[0] = bytes;
            bulk_load(ring, reinterpret_cast<const char*>(bank_src) + row0_src * bank_feat + off, bytes, &smem.full[0]);
            if (kStamp) st[2] = gtime();
        }
    }
    BankTable& table = smem.table;
    if (lane < static_cast<unsigned>(num_banks)) {
        table.dst[lane] = bank_dst;
        table.src[lane] = bank_src;
        table.feat[lane] = bank_feat;
    }
    const int bank_chunks = lane < static_cast<unsigned>(num_banks) ? static_cast<int>((bank_feat + kChunk - 1) / kChunk) : 0;
    int upto = bank_chunks;
#pragma unroll
    for (int d = 1; d <= kMaxBanks; d <<= 1) {
        const int below = __shfl_up_sync(0xffffffffu, upto, d);
        if (lane >= static_cast<unsigned>(d)) upto += below;
    }
    if (lane <= static_cast<unsigned>(kMaxBanks)) table.first_chunk[lane] = upto - bank_chunks;
    const int cpr = __shfl_sync(0xffffffffu, upto, kMaxBanks);
    const ll total = n * cpr;
    const int first = static_cast<int>(blockIdx.x);
    if (first >= total) {
        if (kStamp && lane == 0) st[5] = gtime();
        return;
    }
    // kEarly: the CTA's first chunk (in row 0 when first < cpr) is planned from the scan's registers and issued
    // by lane 0 before the bank table and the other barriers exist (kEarly == 2: issued already, see kFast above)
    const bool early = kEarly && first < cpr;
    if (early) {
        const unsigned owner = __ffs(__ballot_sync(0xffffffffu, first < upto)) - 1;  // bank holding chunk `first`
        const ll b_dst = __shfl_sync(0xffffffffu, bank_dst, owner);
        const ll b_src = __shfl_sync(0xffffffffu, bank_src, owner);
        const ll b_feat = __shfl_sync(0xffffffffu, bank_feat, owner);
        const int b_first = __shfl_sync(0xffffffffu, upto - bank_chunks, owner);
        if (lane == 0 && !fast) {
            mbar_init(&smem.full[0]);
            asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
            const ll off = static_cast<ll>(first - b_first) * kChunk;
            const ll left = b_feat - off;
            const unsigned bytes = static_cast<unsigned>(left < kChunk ? left : kChunk);
            void* dst = reinterpret_cast<char*>(b_dst) + row0_dst * b_feat + off;
            smem.pending_dst[0] = dst;
            smem.pending_bytes[0] = bytes;
            bulk_load(ring, reinterpret_cast<const char*>(b_src) + row0_src * b_feat + off, bytes, &smem.full[0]);
            if (kStamp) st[2] = gtime();
        }
    }
    if (kStamp && lane == 0) st[8] = gtime();
    const ll my_chunks = (total - first + kCtas - 1) / kCtas;
    const ll prologue = my_chunks < kStages ? my_chunks : kStages;
    if (lane < kStages && !(early && lane == 0)) mbar_init(&smem.full[lane]);
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
    if (kStamp && lane == 0) st[9] = gtime();
    if constexpr (kLanePrologue) {
        // lane s issues chunk first + s * kCtas into stage s, its own plan (rows past 0: its own index loads)
        if (lane < prologue) {
            const ll k = first + static_cast<ll>(lane) * kCtas;
            const ll row = k / cpr;
            const int j = static_cast<int>(k - row * cpr);
            const ll dr = row == 0 ? row0_dst : static_cast<ll>(di[row]);
            const ll sr = row == 0 ? row0_src : (si ? static_cast<ll>(si[row]) : row);
            const Chunk c = chunk_at<kChunk>(table, j, dr, sr);
            smem.pending_dst[lane] = c.dst;
            smem.pending_bytes[lane] = c.bytes;
            bulk_load(ring + lane * kChunk, c.src, c.bytes, &smem.full[lane]);
            if (kStamp && lane == 0) st[2] = gtime();
        }
        __syncwarp();
    }
    if (lane != 0) return;
    // lane 0's cursor: the CTA's chunk (kLanePrologue ? prologue : 0), then every kCtas-th
    const ll done = kLanePrologue ? prologue : (early ? 1 : 0);  // chunks already issued
    ll k_next = first + done * kCtas;
    ll row = k_next / cpr;
    int j = static_cast<int>(k_next - row * cpr);
    const ll row_step = kCtas / cpr;
    const int j_step = kCtas % cpr;
    ll cached_row = 0, dst_row = row0_dst, src_row = row0_src;
    unsigned load_stage = static_cast<unsigned>(done % kStages);
    ll bytes = 0;
    auto issue = [&] {
        if (row != cached_row) {
            cached_row = row;
            dst_row = di[row];
            src_row = si ? si[row] : row;
        }
        const Chunk c = chunk_at<kChunk>(table, j, dst_row, src_row);
        row += row_step;
        j += j_step;
        if (j >= cpr) {
            j -= cpr;
            ++row;
        }
        smem.pending_dst[load_stage] = c.dst;
        smem.pending_bytes[load_stage] = c.bytes;
        bulk_load(ring + load_stage * kChunk, c.src, c.bytes, &smem.full[load_stage]);
        load_stage = load_stage + 1 == kStages ? 0 : load_stage + 1;
    };
    if (kStamp) st[10] = gtime();
    if constexpr (!kLanePrologue) {
        for (ll i = done; i < prologue; ++i) {
            issue();
            if (kStamp && i == 0) st[2] = gtime();
        }
    }
    unsigned stage = 0, phase = 0;
    for (ll i = 0; i < my_chunks; ++i) {
        mbar_wait(&smem.full[stage], phase);
        if (kStamp && i == 0) st[3] = gtime();
        if (kStamp && i + 1 == my_chunks) st[4] = gtime();
        bytes += smem.pending_bytes[stage];
        bulk_store(smem.pending_dst[stage], ring + stage * kChunk, smem.pending_bytes[stage]);
        if (i >= 1 && i - 1 + kStages < my_chunks) {
            asm volatile("cp.async.bulk.wait_group.read 1;" ::: "memory");
            issue();
        }
        if (++stage == kStages) {
            stage = 0;
            phase ^= 1;
        }
    }
    if constexpr (kReadWait) {
        asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");
    } else {
        asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
    }
    if (kStamp) {
        st[5] = gtime();
        st[6] = static_cast<ull>(bytes);
        st[7] = static_cast<ull>(my_chunks);
    }
}

// upstream's fast_index_copy_multi, statement by statement (jit/fast_index_copy.cuh), no wait flag
template <int kThreads, int kBlocksPerBank, bool kStamp>
__device__ __forceinline__ void ldg_body(ull dst_ptrs, ull src_ptrs, ull feat_bytes, ull dst_idx, ull src_idx,
                                         ull valid_len, ll length, int num_banks, ull* stamps) {
    ull* st = stamps + 12ull * blockIdx.x;
    __shared__ ull last;
    if (kStamp && threadIdx.x == 0) {
        st[0] = gtime();
        last = 0;
    }
    const int b = static_cast<int>(blockIdx.x / kBlocksPerBank);
    if (b >= num_banks) return;
    const int blk = static_cast<int>(blockIdx.x % kBlocksPerBank);
    const auto* src = reinterpret_cast<const unsigned char*>(reinterpret_cast<const ll*>(src_ptrs)[b]);
    auto* dst = reinterpret_cast<unsigned char*>(reinterpret_cast<const ll*>(dst_ptrs)[b]);
    const ll feat = reinterpret_cast<const ll*>(feat_bytes)[b];
    const ll n = valid_len ? reinterpret_cast<const ll*>(valid_len)[0] : length;
    const ll units = feat >> 4;
    const ll total = n * units;
    if (kStamp && threadIdx.x == 0) stamp_after(st + 1, total);
    const int* di = reinterpret_cast<const int*>(dst_idx);
    const int* si = reinterpret_cast<const int*>(src_idx);
    const ll stride = static_cast<ll>(kBlocksPerBank) * kThreads;
    bool firsti = true;
    for (ll u = static_cast<ll>(blk) * kThreads + threadIdx.x; u < total; u += stride) {
        const ll row = u / units;
        const ll col = (u - row * units) << 4;
        const ll pd = di[row];
        const ll ps = si ? static_cast<ll>(si[row]) : row;
        const uint4 val = *reinterpret_cast<const uint4*>(src + ps * feat + col);
        if (kStamp && threadIdx.x == 0 && firsti) st[2] = gtime();
        *reinterpret_cast<uint4*>(dst + pd * feat + col) = val;
        if (kStamp && threadIdx.x == 0 && firsti) st[3] = gtime();  // the store waited for the load
        firsti = false;
    }
    if (kStamp) {
        atomicMax(&last, gtime());
        __syncthreads();
        if (threadIdx.x == 0) {
            const ll mine = total > static_cast<ll>(blk) * kThreads
                                ? (total - static_cast<ll>(blk) * kThreads + stride - 1) / stride  // waves
                                : 0;
            st[4] = last;
            st[5] = gtime();
            // bytes: units u = blk*kThreads + t + w*stride for w < waves, each < total
            ll units_mine = 0;
            for (ll w = 0; w < mine; ++w) {
                const ll lo = static_cast<ll>(blk) * kThreads + w * stride;
                const ll hi = lo + kThreads < total ? lo + kThreads : total;
                units_mine += hi - lo;
            }
            st[6] = static_cast<ull>(units_mine * 16);
            st[7] = static_cast<ull>(units_mine);
        }
    }
}

}  // namespace lab

#define RING_ARGS ull dst_ptrs, ull src_ptrs, ull feat_bytes, ull dst_idx, ull src_idx, ull valid_len, ll length, \
                  int num_banks, ull stamps
#define CALL_ARGS dst_ptrs, src_ptrs, feat_bytes, dst_idx, src_idx, valid_len, length, num_banks, \
                  reinterpret_cast<ull*>(stamps)

template <int kCtas, int kStages, int kChunk, bool kStamp, bool kReadWait, bool kLanePrologue, int kEarly>
__global__ __launch_bounds__(32, 1) void ring(RING_ARGS) {
    lab::ring_body<kCtas, kStages, kChunk, kStamp, kReadWait, kLanePrologue, kEarly>(CALL_ARGS);
}

template <int kThreads, int kBlocksPerBank, bool kStamp>
__global__ __launch_bounds__(kThreads) void ldg(RING_ARGS) {
    lab::ldg_body<kThreads, kBlocksPerBank, kStamp>(CALL_ARGS);
}
