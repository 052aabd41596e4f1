// Negative control for the "no LDL/STL" and "0-byte stack frame" checks of
// conformance/test_sass.py: a runtime-indexed per-thread array cannot live in registers, so
// ptxas puts it in local memory (a stack frame, STL to fill it, LDL to read it back).

__global__ void local_array(const int* __restrict__ idx, const float* __restrict__ in, float* __restrict__ out,
                            int n) {
    float a[256];
    for (int i = 0; i < 256; ++i) {
        a[i] = 0.0f;
    }
    for (int i = 0; i < n; ++i) {
        a[idx[i] & 255] += in[i];
    }
    out[threadIdx.x] = a[idx[threadIdx.x] & 255];
}
