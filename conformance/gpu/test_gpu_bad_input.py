"""Bad input is stopped on the host, never by the GPU.

Every per-call argument (dtypes, shapes, devices, bank count) is checked by the C++ launcher
before the launch: nothing is launched (a counter wraps the JIT module's ``launch``), no
asynchronous CUDA error is left behind and the slot cache, canaries included, stays
byte-identical. A valid call afterwards still works. (Row sizes and bases that are multiples of
16 are trusted, not checked: the entry point is private, and the offload cache's fused copy plan,
its one caller, checks them when it is built.)
"""

from __future__ import annotations

import pytest

from gpukit.launch import LaunchCounter, call_tma
from gpukit.memory import HostBanks, MissList, SlotCache, check_slot_cache

pytestmark = [pytest.mark.gpu, pytest.mark.slow]

ROWS = [16, 4096 + 16, 48]
EXPERTS, SLOTS = 4, 5


@pytest.fixture(scope="module")
def setup(gpu):
    banks = HostBanks(1, EXPERTS, ROWS, gpu.device, seed=41)
    cache = SlotCache(SLOTS, ROWS, gpu.device)
    misses = MissList(SLOTS, "int32", gpu.device)
    misses.set([4, 0, 1, 2, 3], [3, 0, 1, 2, 0], 3)
    yield banks, cache, misses
    banks.close()


def _args(gpu, banks, cache, misses, **override):
    torch = gpu.torch
    args = {
        "dst_ptrs": cache.dst_ptrs.clone(),  # fresh tensors: never seen (checked) before
        "src_ptrs": banks.src_ptrs[0].clone(),
        "feat_bytes": cache.feat.clone(),
        "dst_indices": misses.dst,
        "src_indices": misses.src,
        "num_indices": misses.num,
    }
    for k, v in override.items():
        args[k] = v(args, torch) if callable(v) else v
    return args


def _nine_banks(gpu, banks, cache, misses):
    b9 = HostBanks(1, EXPERTS, [16] * 9, gpu.device, seed=42)
    c9 = SlotCache(SLOTS, [16] * 9, gpu.device)
    _nine_banks.keep = (b9, c9)  # alive until the next case
    return {
        "dst_ptrs": c9.dst_ptrs,
        "src_ptrs": b9.src_ptrs[0],
        "feat_bytes": c9.feat,
        "dst_indices": misses.dst,
        "src_indices": misses.src,
        "num_indices": misses.num,
    }


# per-call arguments, refused by the C++ launcher: name -> (builder, needs a CUDA device)
CALL_CASES = {
    "more_than_8_banks": (_nine_banks, False),
    "descriptor_int32": (lambda g, b, c, m: _args(g, b, c, m, feat_bytes=lambda a, t: a["feat_bytes"].to(t.int32)), False),
    "descriptor_length_mismatch": (lambda g, b, c, m: _args(g, b, c, m, src_ptrs=lambda a, t: a["src_ptrs"][:2].clone()), False),
    "dst_indices_float32": (lambda g, b, c, m: _args(g, b, c, m, dst_indices=lambda a, t: a["dst_indices"].float(), src_indices=None), False),
    "dst_indices_int16": (lambda g, b, c, m: _args(g, b, c, m, dst_indices=lambda a, t: a["dst_indices"].to(t.int16), src_indices=None), False),
    "dst_indices_2d": (lambda g, b, c, m: _args(g, b, c, m, dst_indices=lambda a, t: a["dst_indices"].view(1, -1), src_indices=None), False),
    "src_indices_int64_vs_int32": (lambda g, b, c, m: _args(g, b, c, m, src_indices=lambda a, t: a["src_indices"].long()), False),
    "src_indices_shorter": (lambda g, b, c, m: _args(g, b, c, m, src_indices=lambda a, t: a["src_indices"][:3].clone()), False),
    "num_indices_int32": (lambda g, b, c, m: _args(g, b, c, m, num_indices=lambda a, t: a["num_indices"].to(t.int32)), False),
    "num_indices_two_elements": (lambda g, b, c, m: _args(g, b, c, m, num_indices=lambda a, t: t.zeros(2, dtype=t.int64, device=a["num_indices"].device)), False),
    "dst_indices_on_cpu": (lambda g, b, c, m: _args(g, b, c, m, dst_indices=lambda a, t: a["dst_indices"].cpu(), src_indices=None), True),
    "src_indices_on_cpu": (lambda g, b, c, m: _args(g, b, c, m, src_indices=lambda a, t: a["src_indices"].cpu()), True),
    "num_indices_on_cpu": (lambda g, b, c, m: _args(g, b, c, m, num_indices=lambda a, t: a["num_indices"].cpu()), True),
    "descriptor_on_cpu": (lambda g, b, c, m: _args(g, b, c, m, dst_ptrs=lambda a, t: a["dst_ptrs"].cpu()), True),
}  # fmt: skip


def _release_nine_banks() -> None:
    kept = getattr(_nine_banks, "keep", None)
    if kept:
        kept[0].close()
        _nine_banks.keep = None


@pytest.mark.parametrize("case", list(CALL_CASES))
def test_bad_call_is_refused_before_launch(real_gpu, setup, tally, case):
    build, _ = CALL_CASES[case]
    gpu = real_gpu
    banks, cache, misses = setup
    args = build(gpu, banks, cache, misses)
    gpu.sync()
    snap = cache.snapshot()
    with LaunchCounter(gpu.decode_gather, gpu.fast_index_copy) as counter:
        with pytest.raises(RuntimeError) as info:
            gpu.decode_gather._decode_gather_jit(**args)
    gpu.sync()  # an asynchronous device error would surface here
    assert str(info.value).strip(), f"{case}: an empty error message"
    assert counter.decode_gather == 0, f"{case}: the kernel was launched"
    assert cache.equals_snapshot(snap), f"{case}: the slot cache changed"
    tally(0, 0)
    tally.note(f"call {case}", f"{type(info.value).__name__}: {str(info.value)[-300:]}")
    _release_nine_banks()


def test_valid_call_after_the_bad_ones(gpu, setup, tally):
    banks, cache, misses = setup
    cache.poison(0xA5)
    call_tma(gpu.decode_gather, cache, banks.src_ptrs[0], misses.dst, misses.src, misses.num)
    err = check_slot_cache(cache, 0xA5, [([4, 0, 1], [3, 0, 1], banks.dev[0])])
    assert err is None, err
    tally(1, 3 * banks.bytes_per_expert)
