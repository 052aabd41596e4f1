// Negative control for the "no CALL.ABS.NOINC" check of conformance/test_sass.py.
//
// The same host -> smem -> global bulk-copy round trip as decode_gather.cuh, except that the
// load uses the `.shared::cluster` destination form. On sm_120 nvcc lowers that form to a call
// into a driver routine (CALL.ABS.NOINC, extern __cuda_syscall_cp_async_bulk_unicast); the
// scanner must flag it. On sm_90 the same PTX lowers to a native UBLKCP.
#include <cstdint>

__global__ void bulk_copy_cluster(const int4* __restrict__ src, int4* __restrict__ dst, uint32_t bytes) {
    __shared__ __align__(128) int4 buf[512];
    __shared__ __align__(8) uint64_t bar;
    if (threadIdx.x != 0) {
        return;
    }
    const auto sbuf = static_cast<uint32_t>(__cvta_generic_to_shared(buf));
    const auto sbar = static_cast<uint32_t>(__cvta_generic_to_shared(&bar));
    asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(sbar) : "memory");
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(sbar), "r"(bytes) : "memory");
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];"
                 ::"r"(sbuf), "l"(src), "r"(bytes), "r"(sbar)
                 : "memory");
    asm volatile(
        "{\n"
        ".reg .pred p;\n"
        "WAIT_%=:\n"
        "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], 0;\n"
        "@!p bra WAIT_%=;\n"
        "}\n" ::"r"(sbar)
        : "memory");
    asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(dst), "r"(sbuf), "r"(bytes)
                 : "memory");
    asm volatile("cp.async.bulk.commit_group;" ::: "memory");
    asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
}
