"""CPU checks of gpukit (no GPU): geometry and statistics, the reference check, the miss-list generator,
the routing model, provenance."""

from __future__ import annotations

import random
import re
from pathlib import Path

import pytest

from suite import results
from suite.commands import MEASUREMENTS
from suite.geometry import NVFP4_EXPERT_BYTES, NVFP4_ROW_BYTES, Ring, geometry_rows, nvfp4_banks, rows_for_bank_count
from gpukit.memory import HostBanks, SlotCache, check_slot_cache, random_misses
from suite.results import REPO_ROOT, device_slug
from gpukit.routing import calibrate_zipf, lru_miss_rate, zipf_routing_trace
from suite.stats import paired_rounds, verdict


def test_nvfp4_geometry():
    assert NVFP4_ROW_BYTES == [1048576, 131072, 4096, 524288, 65536, 8192]
    assert NVFP4_EXPERT_BYTES == 1781760
    assert [b.dtype for b in nvfp4_banks()] == [
        "uint8",
        "float8_e4m3fn",
        "float32",
        "uint8",
        "float8_e4m3fn",
        "float32",
    ]


@pytest.fixture
def results_env(monkeypatch, tmp_path):
    """A scratch results root and device slug (the slug cache cleared before and after)."""
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "res"))
    monkeypatch.setenv(results.DEVICE_ENV, "h200")
    results._this_device.cache_clear()
    yield tmp_path / "res"
    results._this_device.cache_clear()


def test_device_slug_and_paths(results_env):
    assert device_slug("NVIDIA H200") == "h200"
    assert device_slug("NVIDIA GeForce RTX 5090") == "geforce-rtx-5090"
    assert device_slug() == "h200"  # this machine's, from $FT_RESULTS_DEVICE
    assert results.path("gpu") == results_env / "h200/conformance/gpu.json"
    assert results.path("bench", "geforce-rtx-5090") == results_env / "geforce-rtx-5090/bench.json"
    assert results.path("contention") == results_env / "h200x2/contention.json"
    assert results.path("sass") == results_env / "sass.json"
    assert results.path("sanitize", out_dir="/x") == Path("/x/sanitize.json")


def test_documents_carry_schema_and_provenance_of_the_installed_wheel(results_env, monkeypatch):
    import importlib.metadata

    monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.2.1+dg.abcdef123456")
    results.provenance.cache_clear()
    try:
        assert results.installed_series() == "abcdef123456"
        written = results.save("step_pdl", machine={"device_slug": "h200"}, args={"rounds": 3})
        doc = results.load("step_pdl", "h200")
        assert written == results_env / "h200/step_pdl.json"
        assert doc["schema"] == MEASUREMENTS["step_pdl"].schema and doc["generated_at"]
        assert doc["provenance"]["series_hash"] == "abcdef123456"
        assert doc["provenance"]["series_from"] == "installed freetoken"
        assert doc["provenance"]["tree"] is None  # the checkout's patches/ are another series
        assert doc["args"] == {"rounds": 3} and results.devices() == ["h200"]
        assert results.save("contention", machine={"device_slug": "h200"}) == results_env / "h200x2/contention.json"
        assert results.load("contention", "h200x2") == results.load("contention")  # this machine's: h200 -> h200x2
        assert results.load("contention")["schema"] == MEASUREMENTS["contention"].schema
        sass = results.document("sass", reports=[])
        assert "generated_at" not in sass and sass["schema"] == MEASUREMENTS["sass"].schema and sass["provenance"]
        monkeypatch.setattr(importlib.metadata, "version", lambda name: "0.2.1")
        assert results.installed_series() is None
    finally:
        results.provenance.cache_clear()


def test_ring_parse_and_geometry_rows():
    assert Ring.parse("16x4x8192") == Ring(16, 4, 8192) == Ring.parse("16X4x8192")
    for other in ("16x4x8K", "16x4", "16x4x8192x1", "x4x8192", "16x-4x8192"):  # one spelling: the variable's
        with pytest.raises(ValueError, match=f"ring '{other}': expected <ctas>x<stages>x<chunk_bytes> in integers"):
            Ring.parse(other)
    assert Ring(16, 4, 8192).bytes_in_flight == 3 * 8192 * 16  # (stages - 1) chunks per CTA in flight
    assert str(Ring(64, 4, 4096)) == f"{Ring(64, 4, 4096)}" == "64x4x4096" and Ring.parse(str(Ring(7, 5, 2048))) == Ring(7, 5, 2048)
    for chunk in (2048, 8192, 32768):
        rows = geometry_rows(chunk)
        assert all(r % 16 == 0 and r > 0 for r in rows)
        assert {chunk - 16, chunk + 16, chunk, 16, 48, 4096 + 16, (1 << 20) + 16} <= set(rows)
    assert [len(rows_for_bank_count(b, 8192)) for b in range(1, 9)] == list(range(1, 9))


def test_paired_rounds_and_verdict():
    rounds = {
        "upstream": [10.0, 10.2, 9.9, 10.1, 10.0],
        "upstream_aa": [10.1, 10.0, 10.0, 10.0, 10.1],
        "tma": [8.0, 8.1, 8.0, 7.9, 8.0],
    }
    s = paired_rounds(rounds["upstream"], rounds["tma"], rounds["upstream_aa"])
    assert s.verdict == "faster" and s.ratio == pytest.approx(10.0 / 8.0)
    assert s.aa_spread == pytest.approx(max(abs(a / b - 1) for a, b in zip(rounds["upstream"], rounds["upstream_aa"])))
    assert paired_rounds(rounds["upstream"], [10.05] * 5, rounds["upstream_aa"]).verdict == "tie"
    assert paired_rounds(rounds["upstream"], rounds["tma"]).verdict == "n/a"  # no A/A control: no verdict
    assert verdict(0.9, 0.01) == "slower" and verdict(None, 0.01) == "n/a"


@pytest.mark.parametrize("n", [0, 1, 2, 7, 600])
def test_random_misses_place_the_extremes(n):
    rng = random.Random(n)
    for _ in range(20):
        dst, src = random_misses(rng, 600, n, 640, 256)
        assert len(set(dst)) == 600 and all(0 <= s < 640 for s in dst) and all(0 <= r < 256 for r in src)
        if n >= 2:
            assert dst[0] == 639 and dst[n - 1] == 0 and src[0] == 255 and src[n - 1] == 0
        if n == 1:
            assert dst[0] in (0, 639) and src[0] in (0, 255)
    dst, _ = random_misses(random.Random(1), 64, 64, 640, 256, forbid_slot=639)
    assert 639 not in dst


def test_reference_check_catches_every_kind_of_damage():
    torch = pytest.importorskip("torch")
    rows = [16, 48, 4112]
    banks = HostBanks(2, 5, rows, "cpu", seed=3)
    assert banks.ends_at_allocation_end
    assert all(t.data_ptr() % 16 == 0 for layer in banks.host for t in layer)
    assert all(torch.equal(h, d) for hl, dl in zip(banks.host, banks.dev) for h, d in zip(hl, dl))
    cache = SlotCache(6, rows, "cpu")
    plan = [([5, 0], [4, 1], banks.dev[1])]

    def written():
        cache.poison(0xA5)
        for b in range(len(rows)):
            cache.dst[b][5] = banks.dev[1][b][4]
            cache.dst[b][0] = banks.dev[1][b][1]

    written()
    assert check_slot_cache(cache, 0xA5, plan) is None
    written()
    cache.dst[2][3, 7] ^= 1  # an untouched slot
    assert "untouched" in check_slot_cache(cache, 0xA5, plan)
    written()
    cache.dst[1][5, -1] ^= 1  # the last byte of a written row
    assert "written" in check_slot_cache(cache, 0xA5, plan)
    written()
    cache.flat[0][-1] ^= 1  # the canary after bank 0
    assert "canary AFTER" in check_slot_cache(cache, 0xA5, plan)


def test_lru_model_and_zipf_calibration():
    pytest.importorskip("torch")
    trace = zipf_routing_trace(30, 4, 64, 8, 1.2, seed=1)
    assert tuple(trace.shape) == (30, 4, 1, 8)
    assert all(len(set(tok)) == 8 for step in trace.tolist() for layer in step for tok in layer)
    assert lru_miss_rate(trace, 64, 4 * 64) == pytest.approx(
        len({(lay, e) for step in trace.tolist() for lay, layer in enumerate(step) for tok in layer for e in tok})
        / (30 * 4 * 8)
    )
    s, rate = calibrate_zipf(0.1, steps=60, layers=4, experts=64, top_k=8, cache_size=4 * 20, warm_steps=20)
    assert abs(rate - 0.1) < 0.05 and s > 0


def test_scrub_removes_machine_paths():
    from suite.results import scrub

    doc = {"a": ["/tmp/conformance-sass-x1/k.cu", "-I/home/u/.venv/lib/python3.12/site-packages/tvm_ffi/include"],
           "b": str(REPO_ROOT / "results"), "n": 3}
    assert scrub(doc) == {"a": ["<tmp>/k.cu", "-I<site-packages>/tvm_ffi/include"], "b": "results", "n": 3}


def test_committed_results_hold_no_machine_paths():
    for path in (REPO_ROOT / "results").rglob("*"):
        if path.suffix in (".json", ".md", ".log"):
            text = path.read_text(errors="replace")
            assert not re.search(r"(/tmp/|/work/|/root/|/home/)", text), f"{path}: a machine path"


def test_decode_regime_lists_are_fresh_and_verified(monkeypatch):
    """The decode regime's miss lists (CPU tensors here): each layer walks its own permutation, so a
    row comes back only after experts / n lists; slots are distinct; a wrong byte or a stray write fails."""
    torch = pytest.importorskip("torch")
    import types

    from gpukit.decode_regime import Footprint, RegimeGraphs, poisoned_slots

    fp = Footprint(layers=3, experts=8, row_bytes=(32, 48))
    assert Footprint.scaled(None) == Footprint() and Footprint.scaled(1000) == Footprint()
    assert Footprint.scaled(1).layers == 2 and Footprint.scaled(0.1).layers == 1  # 456 MB per NVFP4 layer
    g = torch.Generator().manual_seed(0)
    banks = types.SimpleNamespace(fp=fp, device=torch.device("cpu"), src_ptrs=[None] * 3,
                                  ref=[torch.randint(0, 256, (3, 8, r), dtype=torch.uint8, generator=g) for r in fp.row_bytes])  # fmt: skip
    slots = poisoned_slots(fp.row_bytes, "cpu", slots=20)
    rg = RegimeGraphs(banks, slots, 2)

    def copy():  # what a correct kernel does for the current list
        for layer in range(3):
            for b in range(2):
                slots.dst[b][rg.dst[layer, :2].long()] = banks.ref[b][layer][rg.src[layer, :2].long()]

    seen = []
    for _ in range(4):  # 4 lists x 2 rows = every expert of each layer once
        assert len(set(rg.dst[:, :2].flatten().tolist())) == 6  # distinct slots in one list
        seen.append(rg.src[:, :2].clone())
        copy()
        rg.verify("k")
        rg.next_list()
    for layer in range(3):
        assert sorted(torch.cat([s[layer] for s in seen]).tolist()) == list(range(8))
    rg.check_clean("k")
    copy()
    slots.dst[1][int(rg.dst[2, 1]), 5] ^= 1
    with pytest.raises(AssertionError, match="bank 1"):
        rg.verify("k")
    slots.dst[0][19 if 19 not in rg.dst.flatten().tolist() else 18, 0] ^= 1
    with pytest.raises(AssertionError, match="outside the miss lists"):
        rg.check_clean("k")
    slots.dst[0][19 if 19 not in rg.dst.flatten().tolist() else 18, 0] ^= 1  # mend it again
    with pytest.raises(ValueError, match="regime='fresh'"):
        rg.time_set("k", "fresh", 1)
    # every timed replay of the decode regime finds a list written before its clock starts; replay keeps one
    from gpukit import decode_regime

    slots.poison(decode_regime.POISON)  # the failed verify above left its copied rows in place
    timed = []
    monkeypatch.setattr(decode_regime, "bench", lambda run, **kw: [(timed.append(rg.src.clone()), run(), 1e-6)[2]])
    rg.graphs["k"] = types.SimpleNamespace(replay=copy)
    rg.time_set("k", "decode", 2)
    rg.time_set("k", "replay", 2)
    assert not torch.equal(timed[0], timed[1]) and torch.equal(timed[1], timed[2]) and torch.equal(timed[2], timed[3])


def test_every_committed_result_document_has_its_schema_and_provenance():
    import json

    from suite import results

    schemas = {k.schema for k in MEASUREMENTS.values()}
    # an e2e harness's --log-dir keeps each worker's raw output beside its log: those are logs, not documents; nor
    # are the kernel caches' build manifests (report.model.KERNEL_CACHE); ft bench bw's profiles are upstream's
    # format, each decode_gather entry naming the freetoken (+dg.<series>) that measured it
    docs = [p for p in (REPO_ROOT / "results").rglob("*.json")
            if "history" not in p.parts and not p.parent.name.endswith("-logs") and p.parent.name != "kernel-cache"]
    assert docs
    for path in docs:
        doc = json.loads(path.read_text())
        if path.name == "benchbw.json":
            entries = doc["decode_gather"]["entries"].values()
            assert entries and all("+dg." in e["freetoken"] for e in entries), f"{path}: an entry names no series"
            continue
        assert doc.get("schema") in schemas, f"{path}: schema {doc.get('schema')!r}"
        assert (doc.get("provenance") or {}).get("series_hash"), f"{path}: no provenance"


def test_probe_headers_are_removed_after_the_block_and_never_replace_a_file(tmp_path):
    from gpukit.launch import probe_headers

    (tmp_path / "decode_gather.cuh").write_text("installed")
    with probe_headers({"dg_probe.cuh": "probe"}, tmp_path) as jit:
        assert (jit / "dg_probe.cuh").read_text() == "probe"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["decode_gather.cuh"]
    with pytest.raises(RuntimeError), probe_headers({"dg_probe.cuh": "probe"}, tmp_path):
        raise RuntimeError("the build failed")  # removed on error too
    assert not (tmp_path / "dg_probe.cuh").exists()
    with pytest.raises(FileExistsError, match="decode_gather.cuh"):
        with probe_headers({"decode_gather.cuh": "probe"}, tmp_path):
            pass
    assert (tmp_path / "decode_gather.cuh").read_text() == "installed"


@pytest.fixture
def fake_cupy(monkeypatch):
    """A stand-in ``cupy.cuda.runtime`` that records its calls (the CPU tests never need cupy)."""
    import sys
    import types

    calls = []

    class Runtime:
        def __getattr__(self, name):
            def call(*args):
                calls.append((name, *args))
                if name == "pointerGetAttributes":
                    return types.SimpleNamespace(devicePointer=args[0] + 1)
                if name in ("runtimeGetVersion", "driverGetVersion"):
                    return 13020
                if name == "hostRegister" and args[1] == 13:
                    raise OSError("cudaErrorHostMemoryAlreadyRegistered")
                return 8192
            return call

    cuda = types.SimpleNamespace(runtime=Runtime())
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setitem(sys.modules, "cupy.cuda", cuda)
    return calls


def test_runtime_calls_go_through_cupy_with_cudas_flags(fake_cupy):
    from gpukit import runtime

    runtime.host_register(4096, 8192, "bank 0")
    runtime.host_unregister(4096)
    runtime.memcpy_h2d_async(1, 2, 3, 4)
    assert runtime.device_pointer(4096) == 4097
    assert runtime.device_limit(runtime.CUDA_LIMIT_MALLOC_HEAP_SIZE) == 8192
    assert runtime.versions() == {"cuda_runtime": "13.2", "cuda_driver_api": "13.2"}
    assert fake_cupy[:5] == [("hostRegister", 4096, 8192, 3), ("hostUnregister", 4096), ("memcpyAsync", 1, 2, 3, 1, 4),
                             ("pointerGetAttributes", 4096), ("deviceGetLimit", 2)]  # fmt: skip
    with pytest.raises(RuntimeError, match=r"cudaHostRegister\(13 B, bank 1\) failed: cudaErrorHostMemoryAlreadyRegistered"):
        runtime.host_register(4096, 13, "bank 1")
    with pytest.raises(ValueError, match="nbytes=0"):
        runtime.host_register(4096, 0)
    with pytest.raises(ValueError, match="limit=7"):
        runtime.device_limit(7)


def test_runtime_without_cupy_says_what_to_install(monkeypatch):
    import sys

    from gpukit import runtime

    monkeypatch.setitem(sys.modules, "cupy", None)  # import cupy raises ImportError
    with pytest.raises(RuntimeError, match="pip install cupy-cuda13x"):
        runtime.host_register(4096, 8192)
    assert runtime.versions() == {}


def _fake_kernel_modules():
    """Stand-ins for freetoken.kernel.decode_gather and fast_index_copy: factories of modules whose
    ``launch`` records its calls, and the ring's entry point ``_decode_gather_jit`` that launches it."""
    import types

    launched = []

    def module(name):
        return types.SimpleNamespace(launch=lambda *a: launched.append(name))

    ring = types.SimpleNamespace(decode_gather_module=lambda *a: module("ring"))
    ring._decode_gather_jit = lambda *a: ring.decode_gather_module().launch(*a)
    upstream = types.SimpleNamespace(_jit_fast_index_copy_multi_module=lambda **k: module("upstream"))
    return ring, upstream, launched


def test_launch_counter_counts_each_kernel_and_puts_the_modules_back():
    from gpukit.launch import LaunchCounter

    ring, upstream, launched = _fake_kernel_modules()
    before = (ring.decode_gather_module, ring._decode_gather_jit, upstream._jit_fast_index_copy_multi_module)
    with LaunchCounter(ring, upstream) as counter:
        ring._decode_gather_jit(1)
        ring._decode_gather_jit(2)
        upstream._jit_fast_index_copy_multi_module(num_threads=1024).launch(3)
        assert (counter.decode_gather, counter.upstream, counter.decode_gather_jit_calls) == (2, 1, 2)
    assert launched == ["ring", "ring", "upstream"]
    assert (ring.decode_gather_module, ring._decode_gather_jit, upstream._jit_fast_index_copy_multi_module) == before


def test_a_launch_counter_that_fails_to_enter_leaves_the_modules_as_they_were():
    import types

    from gpukit.launch import LaunchCounter

    _, upstream, _ = _fake_kernel_modules()
    factory = upstream._jit_fast_index_copy_multi_module
    broken = types.SimpleNamespace()  # no _decode_gather_jit: entering fails after upstream's factory is wrapped
    with pytest.raises(AttributeError):
        with LaunchCounter(broken, upstream):
            pass
    assert upstream._jit_fast_index_copy_multi_module is factory
