"""Variants of decode_gather.cuh for the prologue probes (``probe_variants.py``).

Each variant is the INSTALLED kernel with one or more statement blocks swapped, written next to it
(``csrc/jit/dg_<name>.cuh``) so that freetoken's ``load_jit`` builds it as its own module. The
blocks are matched exactly; a variant whose block is not found in the installed kernel is skipped
(and reported), so the probe never times something other than what it names.

* ``current``     -- the installed kernel, unchanged;
* ``serial_loop`` -- first_chunk[] built by a serial loop in lane 0 over the shared-memory table
                     (the kernel before the warp scan);
* ``serial_init`` -- the stage barriers initialised by lane 0 in a loop after the other lanes left;
* ``old``         -- both of the above: the kernel of series 300e60d1fd1d;
* ``early_init``  -- the barriers initialised before the miss count is known (overlapping the
                     first global loads), the proxy fence after it;
* ``exit_read``   -- ``cp.async.bulk.wait_group.read 0`` at exit instead of ``wait_group 0``;
* ``lane_sum``    -- first_chunk[] without shuffles: after the table is in shared memory, every lane
                     sums the chunk counts of the banks below it (independent loads, no serial chain).
* ``hybrid1``, ``hybrid2`` -- CTAs of 256 threads; a call of at most 1 (2) rows is copied by every
                     thread with 16-byte loads, balanced over rows x banks, and never reaches the ring
                     (does the ring's fixed cost lose the one-expert layer?). On 16 CTAs that LDG
                     path streams at ~30 GB/s (16 SMs' loads); ``hybrid1w``/``hybrid2w`` launch 64
                     CTAs, the CTAs past the ring's leaving before it.
* ``prewalk``     -- a second warp per CTA reads 4 bytes in every 2 MiB block of the call's rows as
                     soon as the count is known (a read per 2 MiB, before the clock, takes back most
                     of the fresh rows' cost: ``probe_touchi-*``); the ring itself unchanged.

``UPSTREAM_LOADS`` are variants of upstream's fast_index_copy_multi (``probe_fresh --upstream-loads``):
its 16-byte load written as PTX with an L2 fetch-size hint, to ask whether larger L2 fills make larger
PCIe reads of host memory (the copy engine streams ~8% faster than any SM-driven copy here).
"""

from __future__ import annotations

from pathlib import Path

SCAN = """    // first_chunk[] is the exclusive prefix sum of the banks' chunk counts, taken in
    // registers with a warp scan (lanes past num_banks count 0 chunks, so lanes
    // num_banks..kMaxBanks all hold the row total). A serial loop in lane 0 over the
    // table in shared memory sat between the first load's return and the first bulk
    // request: on a one-expert step that delay is paid once per call, unhidden.
    const int32_t bank_chunks = lane < static_cast<unsigned>(p.num_banks)
                                    ? static_cast<int32_t>((bank_feat + kChunkBytes - 1) / kChunkBytes)
                                    : 0;
    int32_t upto = bank_chunks;
#pragma unroll
    for (int d = 1; d <= kMaxBanks; d <<= 1) {
        const int32_t below = __shfl_up_sync(0xffffffffu, upto, d);
        if (lane >= static_cast<unsigned>(d)) {
            upto += below;
        }
    }
    if (lane <= static_cast<unsigned>(kMaxBanks)) {
        table.first_chunk[lane] = upto - bank_chunks;
    }
    const int32_t chunks_per_row = __shfl_sync(0xffffffffu, upto, kMaxBanks);
    __syncwarp();
"""
SERIAL_LOOP = """    __syncwarp();
    if (lane == 0) {
        int32_t first = 0;
        for (int b = 0; b < p.num_banks; ++b) {
            table.first_chunk[b] = first;
            first += static_cast<int32_t>((table.feat[b] + kChunkBytes - 1) / kChunkBytes);
        }
        for (int b = p.num_banks; b <= kMaxBanks; ++b) {
            table.first_chunk[b] = first;
        }
    }
    __syncwarp();
    const int32_t chunks_per_row = table.first_chunk[kMaxBanks];
"""
LANE_SUM = """    // every lane sums the chunk counts of the banks below it: independent shared-memory
    // loads, no loop-carried chain through one lane, no warp shuffles
    __syncwarp();
    int32_t below = 0;
    int32_t row_total = 0;
#pragma unroll
    for (int b = 0; b < kMaxBanks; ++b) {
        if (b < p.num_banks) {
            const int32_t c = static_cast<int32_t>((table.feat[b] + kChunkBytes - 1) / kChunkBytes);
            below += b < static_cast<int>(lane) ? c : 0;
            row_total += c;
        }
    }
    if (lane <= static_cast<unsigned>(kMaxBanks)) {
        table.first_chunk[lane] = below;
    }
    const int32_t chunks_per_row = row_total;
    __syncwarp();
"""
INIT = """    if (lane < kStages) {
        mbar_init(&full[lane]);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
    if (lane != 0) {
        return;
    }
"""
SERIAL_INIT = """    if (lane != 0) {
        return;
    }
    for (std::size_t s = 0; s < kStages; ++s) {
        mbar_init(&full[s]);
    }
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
"""
FENCE_ONLY = """    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    __syncwarp();
    if (lane != 0) {
        return;
    }
"""
SMEM_DECL = """    __shared__ __align__(8) StaticSmem<kStages> smem;
    BankTable& table"""
TABLE_ONLY = """    BankTable& table"""
ROW0 = """        row0_src = src_indices != nullptr ? static_cast<int64_t>(src_indices[0]) : 0;
    }
"""
ROW0_EARLY_INIT = ROW0 + """    __shared__ __align__(8) StaticSmem<kStages> smem;
#if FREETOKEN_DECODE_GATHER_TMA
    if (lane < kStages) {
        mbar_init(&smem.full[lane]);
    }
#endif
"""
FIC_LOAD = "        const uint4 v = *reinterpret_cast<const uint4*>(src + ps * feat + col);\n"


def _fic_load(qualifiers: str) -> str:
    return f"""        uint4 v;
        asm volatile("ld.global{qualifiers}.v4.u32 {{%0,%1,%2,%3}}, [%4];"
                     : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(src + ps * feat + col));
"""


#: upstream's multi-bank loop with its row load as PTX: no hint (the control), 128- and 256-byte L2 fills
UPSTREAM_LOADS = {"nc": _fic_load(".nc"), "nc_l2_128": _fic_load(".nc.L2::128B"), "nc_l2_256": _fic_load(".nc.L2::256B")}


def upstream_load_variant(fic_text: str, name: str) -> str:
    """fast_index_copy.cuh with its multi-bank row load replaced by ``UPSTREAM_LOADS[name]``."""
    if name not in UPSTREAM_LOADS:
        raise SystemExit(f"unknown upstream load {name!r}; known: {', '.join(UPSTREAM_LOADS)}")
    if fic_text.count(FIC_LOAD) != 1:
        raise SystemExit("fast_index_copy_multi's row load is not found once in the installed kernel")
    return fic_text.replace(FIC_LOAD, UPSTREAM_LOADS[name])


ONE_WARP = "inline constexpr unsigned kThreads = 32;  // one warp: lane 0 drives the ring\n"
MANY_WARPS = "inline constexpr unsigned kThreads = 256;  // hybrid probe: every thread copies a small call\n"
NO_MISSES = """    if (n == 0) {
        return;  // a step with no misses: no barrier setup, no shared-memory traffic
    }
"""


LAUNCH = """        if (args.use_int32) {
            decode_gather::prepare_device<kernel<int32_t>, kRingBytes, kOptIn>(args.device);
            LaunchKernel(kCtas, decode_gather::kThreads, args.device, kRingBytes)(kernel<int32_t>, args.params);
        } else {
            decode_gather::prepare_device<kernel<int64_t>, kRingBytes, kOptIn>(args.device);
            LaunchKernel(kCtas, decode_gather::kThreads, args.device, kRingBytes)(kernel<int64_t>, args.params);
        }
"""
WIDE_LAUNCH = LAUNCH.replace("LaunchKernel(kCtas,", "LaunchKernel(kCtas > 64 ? kCtas : 64,")


def _ldg_path(max_rows: int) -> str:
    """A call of at most ``max_rows`` rows is copied by every thread of the grid with 16-byte loads (8 in
    flight per thread), balanced over the call's rows x banks in bank order; larger calls go on to the
    ring (warp 0 of each of the first kCtas CTAs; CTAs past them, launched for a wider LDG grid, leave)."""
    return NO_MISSES + f"""    if (n <= {max_rows}) {{
        int64_t fu[kMaxBanks], sb[kMaxBanks], db[kMaxBanks];
        int64_t row_units = 0;
#pragma unroll
        for (int b = 0; b < kMaxBanks; ++b) {{
            const bool on = b < p.num_banks;
            fu[b] = on ? p.feat_bytes[b] / 16 : 0;
            sb[b] = on ? p.src_ptrs[b] : 0;
            db[b] = on ? p.dst_ptrs[b] : 0;
            row_units += fu[b];
        }}
        const int64_t total = n * row_units;
        const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
        for (int64_t u0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; u0 < total; u0 += 8 * step) {{
            uint4 v[8];
            uint4* d[8];
#pragma unroll
            for (int k = 0; k < 8; ++k) {{
                const int64_t u = u0 + k * step;
                d[k] = nullptr;
                if (u < total) {{
                    const int64_t r = u / row_units;
                    int64_t w = u - r * row_units;
                    int64_t s = 0, t = 0, f = 0;
                    bool found = false;
#pragma unroll
                    for (int b = 0; b < kMaxBanks; ++b) {{
                        if (!found && w < fu[b]) {{
                            s = sb[b];
                            t = db[b];
                            f = fu[b];
                            found = true;
                        }} else if (!found) {{
                            w -= fu[b];
                        }}
                    }}
                    const int64_t srow = src_indices != nullptr ? static_cast<int64_t>(src_indices[r]) : r;
                    const int64_t drow = static_cast<int64_t>(dst_indices[r]);
                    v[k] = *reinterpret_cast<const uint4*>(s + (srow * f + w) * 16);
                    d[k] = reinterpret_cast<uint4*>(t + (drow * f + w) * 16);
                }}
            }}
#pragma unroll
            for (int k = 0; k < 8; ++k) {{
                if (d[k] != nullptr) {{
                    *d[k] = v[k];
                }}
            }}
        }}
        return;
    }}
    if (blockIdx.x >= kCtas) {{
        return;
    }}
"""


TWO_WARPS = "inline constexpr unsigned kThreads = 64;  // prewalk probe: warp 1 reads the rows' 2 MiB blocks\n"
PREWALK = NO_MISSES + """    if (threadIdx.x >= 32) {
        // warp 1 of every CTA reads 4 bytes at the start of each (row, bank) and at every 2 MiB boundary
        // inside it, as soon as the count is known: the walks that a first read of a block pays then run
        // beside the ring's first requests instead of when the ring reaches each bank
        const int nb = p.num_banks;
        const int64_t lanes = static_cast<int64_t>(gridDim.x) * 32;
        for (int64_t q = static_cast<int64_t>(blockIdx.x) * 32 + (threadIdx.x - 32); q < n * nb; q += lanes) {
            const int64_t r = q / nb;
            const int b = static_cast<int>(q - r * nb);
            const int64_t srow = src_indices != nullptr ? static_cast<int64_t>(src_indices[r]) : r;
            const int64_t feat = p.feat_bytes[b];
            const uint64_t s = static_cast<uint64_t>(p.src_ptrs[b]) + static_cast<uint64_t>(srow * feat);
            uint32_t x;
            asm volatile("ld.global.nc.L1::no_allocate.b32 %0, [%1];" : "=r"(x) : "l"(s));
            for (uint64_t a = (s | ((2ull << 20) - 1)) + 1; a < s + static_cast<uint64_t>(feat); a += 2ull << 20) {
                asm volatile("ld.global.nc.L1::no_allocate.b32 %0, [%1];" : "=r"(x) : "l"(a));
            }
        }
        return;
    }
"""


EXIT_FULL = 'asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");'
EXIT_READ = 'asm volatile("cp.async.bulk.wait_group.read 0;" ::: "memory");'

VARIANTS: dict[str, list[tuple[str, str]]] = {
    "serial_loop": [(SCAN, SERIAL_LOOP)],
    "serial_init": [(INIT, SERIAL_INIT)],
    "old": [(SCAN, SERIAL_LOOP), (INIT, SERIAL_INIT)],
    "early_init": [(INIT, FENCE_ONLY), (SMEM_DECL, TABLE_ONLY), (ROW0, ROW0_EARLY_INIT)],
    "exit_read": [(EXIT_FULL, EXIT_READ)],
    "lane_sum": [(SCAN, LANE_SUM)],
    "hybrid1": [(ONE_WARP, MANY_WARPS), (NO_MISSES, _ldg_path(1))],
    "hybrid2": [(ONE_WARP, MANY_WARPS), (NO_MISSES, _ldg_path(2))],
    "prewalk": [(ONE_WARP, TWO_WARPS), (NO_MISSES, PREWALK)],
    "hybrid1w": [(ONE_WARP, MANY_WARPS), (NO_MISSES, _ldg_path(1)), (LAUNCH, WIDE_LAUNCH)],
    "hybrid2w": [(ONE_WARP, MANY_WARPS), (NO_MISSES, _ldg_path(2)), (LAUNCH, WIDE_LAUNCH)],
}


def make(jit_dir: Path, names: list[str]) -> tuple[dict[str, str], dict[str, str], dict[str, str]]:
    """The requested variants of ``jit_dir``'s decode_gather.cuh: ({name: file}, {file: text} to lay
    beside it with :func:`gpukit.kernels.probe_headers`, {name: why skipped})."""
    base = (jit_dir / "decode_gather.cuh").read_text()
    files, texts, skipped = {}, {}, {}
    for name in names:
        if name == "current":
            files[name] = "decode_gather.cuh"
            continue
        if name not in VARIANTS:
            raise SystemExit(f"unknown variant {name!r}; known: current, {', '.join(VARIANTS)}")
        text = base
        for old, new in VARIANTS[name]:
            if text.count(old) != 1:
                skipped[name] = f"block not found once in the installed kernel: {old.strip().splitlines()[0]!r}"
                break
            text = text.replace(old, new)
        else:
            files[name] = f"dg_{name}.cuh"
            texts[files[name]] = text
    return files, texts, skipped


def load(files: dict[str, str], name: str, ring):
    """Build variant ``name`` (a file of :func:`make`, laid beside the installed headers) with ``ring``
    (suite.geometry.Ring) as its own JIT module ``dg<name>``."""
    from freetoken.kernel import utils as freetoken_utils

    args = freetoken_utils.make_cpp_args(ring.ctas, ring.stages, ring.chunk_bytes)
    return freetoken_utils.load_jit(f"dg{name}", *args, cuda_files=[files[name]], cuda_wrappers=[("launch", f"&DecodeGatherKernel<{args}>::run")])
