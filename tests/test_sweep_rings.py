"""CPU test of the ceiling sweep's ring filter (bench/sweep.py) against the installed series: it keeps every
ring a GPU's per-block shared memory holds (the kernel opts in past 48 KiB) and skips the others, naming why."""

from __future__ import annotations

import pytest

from suite.geometry import OPT_IN_RINGS, Ring


def _device(monkeypatch, torch, name: str, optin: int):
    props = type("Props", (), {"name": name, "shared_memory_per_block_optin": optin})()
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda *a, **k: props)
    return torch.device("cuda", 0)


def test_the_sweep_keeps_what_the_gpu_holds_and_names_why_it_skips_the_rest(monkeypatch):
    torch = pytest.importorskip("torch")
    decode_gather = pytest.importorskip("freetoken.kernel.decode_gather", reason="needs the patched freetoken")
    from bench import sweep

    too_big = Ring(8, 4, 32768)  # 128 KiB of ring: more than an sm_120 card gives a block
    rings = [Ring(16, 4, 8192), *OPT_IN_RINGS, too_big]
    doc = {"skipped": []}
    h200 = _device(monkeypatch, torch, "NVIDIA H200", 227 * 1024)
    assert sweep.buildable(doc, rings, sweep.smem_reason(decode_gather, h200)) == rings and doc["skipped"] == []
    card = _device(monkeypatch, torch, "RTX 5070 Ti", 101376)
    assert sweep.buildable(doc, rings, sweep.smem_reason(decode_gather, card)) == rings[:-1]
    (skipped,) = doc["skipped"]
    assert (skipped["ctas"], skipped["stages"], skipped["chunk_bytes"]) == tuple(too_big)
    assert "RTX 5070 Ti" in skipped["reason"] and "101376" in skipped["reason"]
    huge = Ring(1, 16, 16384)  # 256 KiB: past what any device allows, refused before asking the device
    assert sweep.smem_reason(decode_gather, card)(huge).startswith("stages*chunk_bytes 262144 > MAX_RING_BYTES")


def test_the_sweeps_per_cta_shapes_cross_its_cta_counts(tmp_path, caplog):
    """``--per-cta`` is not a ring: ``STAGESxCHUNK`` per CTA, crossed with ``--ctas`` (rings are ``--rings``, whole)."""
    from bench import sweep

    assert sweep.parse_rings([4, 16], "4x8K,3x16384") == [Ring(4, 4, 8192), Ring(16, 4, 8192), Ring(4, 3, 16384),
                                                          Ring(16, 3, 16384)]  # fmt: skip
    args = sweep.parse_args(["--ctas", "8", "--per-cta", "2x4K"])
    assert sweep.plan(args)[0] == [Ring(8, 2, 4096)]
    for bad in ("16x4x8192", "4", "4xK"):
        with pytest.raises(ValueError, match=f"--per-cta '{bad}': expected STAGESxCHUNK"):
            sweep.parse_rings([4], bad)
    caplog.set_level("INFO")
    assert sweep.main(["--dry-run", "--per-cta", "16x4x8192", "--out", str(tmp_path)]) == 2
    assert not any(tmp_path.iterdir())
    assert "--per-cta '16x4x8192': expected STAGESxCHUNK" in caplog.text
