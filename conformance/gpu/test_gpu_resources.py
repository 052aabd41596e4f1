"""The first launch of decode_gather must not change the context's resources.

Background (decode_gather.cuh): on sm_120 the ``.shared::cluster`` bulk-copy form lowers to a call
into a driver routine whose first launch raises the per-thread stack limit to ~14 KiB for good
(~1.4 GiB of VRAM on a 70-SM card, invisible to PyTorch: FreeToken #751's figures, not measured here). The module uses only ``.shared::cta``;
this test pins that down on the machine it runs on: in a FRESH process, after every buffer is
allocated and the JIT module is loaded, the CUDA stack-size limit (cudaDeviceGetLimit) must be
unchanged and the free device memory (cudaMemGetInfo) within a small tolerance across the first
launch of each ring (the default ring, 32x2x23552, the largest without a shared-memory opt-in, and the
opt-in rings, which the first launch opts in to their shared memory).
Upstream's kernel is measured the same way, in the same process, as a control.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from suite.results import REPO_ROOT

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

MEMORY_TOLERANCE = 32 << 20  # lazy module load of one small kernel is well below this

CHILD = r"""
import json
import torch
from gpukit.runtime import CUDA_LIMIT_MALLOC_HEAP_SIZE, CUDA_LIMIT_STACK_SIZE, device_limit
from suite.geometry import LARGEST_PLAIN_RING, OPT_IN_RINGS, Ring, UPSTREAM_BLOCKS_PER_BANK, UPSTREAM_THREADS
from gpukit.launch import call_tma, call_upstream, default_ring, load_kernels
from gpukit.memory import HostBanks, MissList, SlotCache, check_slot_cache

decode_gather, fast_index_copy = load_kernels()
dev = torch.device("cuda")
torch.cuda.init()
rows = [16, 4096 + 16, (1 << 20) + 16]
banks = HostBanks(1, 4, rows, dev, seed=3)
cache = SlotCache(4, rows, dev)
misses = MissList(4, "int32", dev)
misses.set([3, 0, 1, 2], [3, 0, 2, 1], 4)
rings = [default_ring(decode_gather), LARGEST_PLAIN_RING, *OPT_IN_RINGS]  # built by the session's precompile
out = {{"launches": []}}

def measure(name, launch):
    cache.poison(0xA5)
    torch.cuda.synchronize()
    s0 = device_limit(CUDA_LIMIT_STACK_SIZE)
    h0 = device_limit(CUDA_LIMIT_MALLOC_HEAP_SIZE)
    f0 = torch.cuda.mem_get_info()[0]
    launch()
    torch.cuda.synchronize()
    s1 = device_limit(CUDA_LIMIT_STACK_SIZE)
    h1 = device_limit(CUDA_LIMIT_MALLOC_HEAP_SIZE)
    f1 = torch.cuda.mem_get_info()[0]
    err = check_slot_cache(cache, 0xA5, [([3, 0, 1, 2], [3, 0, 2, 1], banks.dev[0])])
    out["launches"].append({{"name": name, "stack_before": s0, "stack_after": s1, "heap_before": h0, "heap_after": h1,
                            "free_before": f0, "free_after": f1, "copy_error": err}})

for r in rings:  # load every module first: the test is about the first LAUNCH
    decode_gather.decode_gather_module(**r.kwargs())
fast_index_copy._jit_fast_index_copy_multi_module(num_threads=UPSTREAM_THREADS, blocks_per_bank=UPSTREAM_BLOCKS_PER_BANK)
# every torch kernel the measurement itself uses (fill, index, compare) is loaded before the baseline
cache.poison(0x11)
check_slot_cache(cache, 0x11, [])
for r in rings:
    measure(f"decode_gather {r}", lambda r=r: call_tma(decode_gather, cache, banks.src_ptrs[0], misses.dst, misses.src, misses.num, r))
measure("upstream", lambda: call_upstream(fast_index_copy, cache, banks.src_ptrs[0], misses.dst, misses.src, misses.num))
out["device"] = torch.cuda.get_device_name()
print("RESULT " + json.dumps(out))
"""


def test_first_launch_leaves_stack_limit_and_memory_alone(real_gpu, tally):
    # a fresh process (nothing loaded yet); run from the repository root, which ``-c`` puts on its path
    proc = subprocess.run(
        [sys.executable, "-c", CHILD.replace("{{", "{").replace("}}", "}")],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO_ROOT,
    )
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, (
        f"child failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    )
    result = json.loads(lines[-1][len("RESULT ") :])
    tally.note("first_launch", result["launches"])
    for rec in result["launches"]:
        assert rec["copy_error"] is None, f"{rec['name']}: {rec['copy_error']}"
        if rec["name"].startswith("decode_gather"):
            assert rec["stack_after"] == rec["stack_before"], (
                f"{rec['name']}: first launch changed the CUDA stack limit {rec['stack_before']} -> {rec['stack_after']} B"
            )
            assert rec["heap_after"] == rec["heap_before"], f"{rec['name']}: malloc heap limit changed"
            lost = rec["free_before"] - rec["free_after"]
            assert lost <= MEMORY_TOLERANCE, f"{rec['name']}: first launch took {lost / 2**20:.1f} MiB of device memory"
            tally(1, 4 * sum([16, 4096 + 16, (1 << 20) + 16]))
