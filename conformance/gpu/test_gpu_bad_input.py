"""Bad input is stopped by the host-side checks, never by the GPU.

Each case raises a clear error naming the offending argument, launches nothing (a counter wraps the
JIT module's ``launch``), leaves no asynchronous CUDA error behind (the device synchronizes cleanly)
and leaves the slot cache, canaries included, byte-identical. A valid call afterwards still works.
"""

from __future__ import annotations

import pytest

from gpukit.kernels import LaunchCounter, call_ours
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


def _shift(t, torch, bank, by):
    out = t.clone()
    out[bank] += by
    return out


def _with_rows(*row_bytes):
    """A builder whose descriptor has these per-bank row sizes (bytes)."""
    return lambda g, b, c, m: _args(
        g, b, c, m, feat_bytes=lambda a, t: t.tensor(row_bytes, dtype=t.int64, device=a["feat_bytes"].device)
    )


# name -> (exception, substring the message must contain, builder, needs a CUDA device)
CASES = {
    "more_than_8_banks": (ValueError, "num_banks", _nine_banks, False),
    "row_24_bytes": (ValueError, "feat_bytes", _with_rows(24, 4112, 48), False),
    "row_8_bytes": (ValueError, "feat_bytes", _with_rows(16, 4112, 8), False),
    "dst_base_misaligned": (
        ValueError,
        "dst_ptrs",
        lambda g, b, c, m: _args(g, b, c, m, dst_ptrs=lambda a, t: _shift(a["dst_ptrs"], t, 1, 8)),
        False,
    ),
    "src_base_misaligned": (
        ValueError,
        "src_ptrs",
        lambda g, b, c, m: _args(g, b, c, m, src_ptrs=lambda a, t: _shift(a["src_ptrs"], t, 2, 8)),
        False,
    ),
    "descriptor_int32": (
        ValueError,
        "feat_bytes",
        lambda g, b, c, m: _args(g, b, c, m, feat_bytes=lambda a, t: a["feat_bytes"].to(t.int32)),
        False,
    ),
    "descriptor_length_mismatch": (
        ValueError,
        "src_ptrs",
        lambda g, b, c, m: _args(g, b, c, m, src_ptrs=lambda a, t: a["src_ptrs"][:2].clone()),
        False,
    ),
    "dst_indices_float32": (
        ValueError,
        "dst_indices",
        lambda g, b, c, m: _args(g, b, c, m, dst_indices=lambda a, t: a["dst_indices"].float(), src_indices=None),
        False,
    ),
    "dst_indices_int16": (
        ValueError,
        "dst_indices",
        lambda g, b, c, m: _args(g, b, c, m, dst_indices=lambda a, t: a["dst_indices"].to(t.int16), src_indices=None),
        False,
    ),
    "dst_indices_2d": (
        ValueError,
        "dst_indices",
        lambda g, b, c, m: _args(g, b, c, m, dst_indices=lambda a, t: a["dst_indices"].view(1, -1), src_indices=None),
        False,
    ),
    "src_indices_int64_vs_int32": (
        ValueError,
        "src_indices",
        lambda g, b, c, m: _args(g, b, c, m, src_indices=lambda a, t: a["src_indices"].long()),
        False,
    ),
    "src_indices_shorter": (
        ValueError,
        "src_indices",
        lambda g, b, c, m: _args(g, b, c, m, src_indices=lambda a, t: a["src_indices"][:3].clone()),
        False,
    ),
    "num_indices_int32": (
        ValueError,
        "num_indices",
        lambda g, b, c, m: _args(g, b, c, m, num_indices=lambda a, t: a["num_indices"].to(t.int32)),
        False,
    ),
    "num_indices_two_elements": (
        ValueError,
        "num_indices",
        lambda g, b, c, m: _args(
            g, b, c, m, num_indices=lambda a, t: t.zeros(2, dtype=t.int64, device=a["num_indices"].device)
        ),
        False,
    ),
    "dst_indices_on_cpu": (
        ValueError,
        "dst_indices",
        lambda g, b, c, m: _args(g, b, c, m, dst_indices=lambda a, t: a["dst_indices"].cpu(), src_indices=None),
        True,
    ),
    "src_indices_on_cpu": (
        ValueError,
        "src_indices",
        lambda g, b, c, m: _args(g, b, c, m, src_indices=lambda a, t: a["src_indices"].cpu()),
        True,
    ),
    "num_indices_on_cpu": (
        ValueError,
        "num_indices",
        lambda g, b, c, m: _args(g, b, c, m, num_indices=lambda a, t: a["num_indices"].cpu()),
        True,
    ),
}


@pytest.mark.parametrize("case", list(CASES))
def test_bad_input_is_rejected_on_the_host(gpu, setup, tally, case):
    exc, needle, build, needs_cuda = CASES[case]
    if needs_cuda and gpu.fake:
        pytest.skip("a wrong-device case needs a CUDA device")
    banks, cache, misses = setup
    args = build(gpu, banks, cache, misses)
    gpu.sync()
    snap = cache.snapshot()
    with LaunchCounter(gpu.dgm, gpu.fic) as counter:
        with pytest.raises(exc) as info:
            gpu.dgm.decode_gather_jit(**args)
    gpu.sync()  # an asynchronous device error would surface here
    assert needle in str(info.value), f"{case}: the error does not name {needle!r}: {info.value}"
    assert counter.decode_gather == 0, f"{case}: the kernel was launched"
    assert cache.equals_snapshot(snap), f"{case}: the slot cache changed"
    tally(0, 0)
    tally.note(case, f"{type(info.value).__name__}: {info.value}")
    kept = getattr(_nine_banks, "keep", None)
    if kept:
        kept[0].close()
        _nine_banks.keep = None


def test_descriptor_on_the_wrong_device_is_rejected(real_gpu, setup, tally):
    """Not checked in Python (the descriptor's device is taken from feat_bytes): the C++ launcher's
    tensor matcher must reject it before the launch; the cache must be untouched."""
    gpu = real_gpu
    banks, cache, misses = setup
    args = _args(gpu, banks, cache, misses, dst_ptrs=lambda a, t: a["dst_ptrs"].cpu())
    snap = cache.snapshot()
    with pytest.raises((ValueError, RuntimeError, TypeError)) as info:
        gpu.dgm.decode_gather_jit(**args)
    gpu.sync()
    assert cache.equals_snapshot(snap)
    tally.note("descriptor_on_cpu", f"{type(info.value).__name__}: {str(info.value)[:300]}")


def test_unchecked_descriptor_under_capture_raises(real_gpu, setup, tally):
    """A descriptor first seen during CUDA-graph capture cannot be read back to the host: the call
    raises RuntimeError instead of syncing inside the capture, and nothing is recorded."""
    gpu, torch = real_gpu, real_gpu.torch
    banks, cache, misses = setup
    args = _args(gpu, banks, cache, misses)
    scratch = torch.zeros(1, device=gpu.device)
    snap = cache.snapshot()
    graph = torch.cuda.CUDAGraph()
    with pytest.raises(RuntimeError, match="before CUDA-graph capture"):
        with torch.cuda.graph(graph):
            scratch.add_(1)
            gpu.dgm.decode_gather_jit(**args)
    gpu.sync()
    assert cache.equals_snapshot(snap)
    del graph
    tally(0, 0)


def test_valid_call_after_the_bad_ones(gpu, setup, tally):
    banks, cache, misses = setup
    cache.poison(0xA5)
    call_ours(gpu.dgm, cache, banks.src_ptrs[0], misses.dst, misses.src, misses.num)
    err = check_slot_cache(cache, 0xA5, [([4, 0, 1], [3, 0, 1], banks.dev[0])])
    assert err is None, err
    tally(1, 3 * banks.bytes_per_expert)
