// Negative control for the "0 spill bytes" check of conformance/test_sass.py: 96 live
// accumulators per thread under __launch_bounds__(1024, 2) (at most 32 registers per thread on
// a 64K-register SM) do not fit, so ptxas spills them to local memory.

__global__ void __launch_bounds__(1024, 2)
    register_spill(const float* __restrict__ in, float* __restrict__ out, int n) {
    float acc[96];
#pragma unroll
    for (int a = 0; a < 96; ++a) {
        acc[a] = in[a * 1024 + threadIdx.x];
    }
    for (int i = 0; i < n; ++i) {
        const float x = in[i];
#pragma unroll
        for (int a = 0; a < 96; ++a) {
            acc[a] = acc[a] * x + acc[(a + 1) % 96];
        }
    }
#pragma unroll
    for (int a = 0; a < 96; ++a) {
        out[a * 1024 + threadIdx.x] = acc[a];
    }
}
