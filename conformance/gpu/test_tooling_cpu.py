"""CPU checks of the GPU tier's own tooling (no GPU, not marked gpu): the shared geometry and
statistics, the benchmark device clock, the reference check, the miss-list generator, the routing model, the compute-sanitizer
log parser, and the sweep / report renderers on synthetic inputs written to a temp dir."""

from __future__ import annotations

import json
import random
import re

import pytest

from gpukit.geometry import NVFP4_EXPERT_BYTES, NVFP4_ROW_BYTES, Ring, geometry_rows, nvfp4_banks, rows_for_bank_count
from gpukit.machine import device_slug
from gpukit.memory import HostBanks, SlotCache, check_slot_cache, random_misses
from gpukit.routing import calibrate_zipf, lru_miss_rate, zipf_routing_trace
from gpukit.schema import REPO_ROOT, resolve_dir
from gpukit.stats import summarize_rounds, verdict


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


def test_device_slug_and_dirs():
    assert device_slug("NVIDIA H200") == "h200"
    assert device_slug("NVIDIA GeForce RTX 5090") == "geforce-rtx-5090"
    assert device_slug(None) == "unknown"
    assert resolve_dir("results/{device}/conformance", "h200") == REPO_ROOT / "results/h200/conformance"


def test_ring_parse_and_geometry_rows():
    assert Ring.parse("16x4x8K") == Ring(16, 4, 8192) == Ring.parse("16x4x8192")
    assert Ring(16, 4, 8192).tag == "16x4x8K" and Ring(16, 4, 8192).bytes_in_flight == 512 * 1024
    for chunk in (2048, 8192, 32768):
        rows = geometry_rows(chunk)
        assert all(r % 16 == 0 and r > 0 for r in rows)
        assert {chunk - 16, chunk + 16, chunk, 16, 48, 4096 + 16, (1 << 20) + 16} <= set(rows)
    assert [len(rows_for_bank_count(b, 8192)) for b in range(1, 9)] == list(range(1, 9))


def test_summarize_rounds_and_verdict():
    rounds = {
        "upstream": [10.0, 10.2, 9.9, 10.1, 10.0],
        "upstream_aa": [10.1, 10.0, 10.0, 10.0, 10.1],
        "ours": [8.0, 8.1, 8.0, 7.9, 8.0],
    }
    s = summarize_rounds(rounds)
    assert s["verdict"] == "faster" and s["speedup"] == pytest.approx(10.0 / 8.0)
    assert s["aa_spread"] == pytest.approx(
        max(abs(a / b - 1) for a, b in zip(rounds["upstream"], rounds["upstream_aa"]))
    )
    tie = summarize_rounds({**rounds, "ours": [10.05] * 5})
    assert tie["verdict"] == "tie"
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


def test_sanitizer_log_parser():
    from conformance.gpu import run_sanitizer

    run_sanitizer.self_test()
    assert run_sanitizer.main(["--dry-run"]) == 0


def test_sweep_dry_run(tmp_path):
    from bench import sweep

    assert sweep.main(["--dry-run", "--out", str(tmp_path), "--quick"]) == 0
    doc = json.loads((tmp_path / "ceiling.json").read_text())
    assert doc["synthetic"] and doc["ring"] and doc["summary"]["copy_engine_gbps"]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert doc["png"] is None
    else:
        assert (tmp_path / "ceiling.png").stat().st_size > 10_000


def test_report_renders_only_numbers_from_the_json(tmp_path):
    from bench import report

    results = tmp_path / "results"
    report.synthetic_results(results)
    data = report.load_results(results)
    text = report.render_report(data, results)
    pr = report.render_pr(data)
    bench = json.loads((results / "synthetic-gpu" / "bench.json").read_text())
    for row in bench["gather"]:
        assert f"{row['us']['upstream']:,.2f}" in text
    for needle in (
        "## Not measured",
        "## Reproduce",
        "python bench/sweep.py",
        "### Conformance (GPU tier)",
        "### compute-sanitizer",
        "1,202",
    ):
        assert needle in text
    assert "## What changed" in pr and "| n / layer |" in pr
    # no number in the fixed prose: every digit outside tables/JSON-derived lines comes from the inputs
    prose = "\n".join(line for _, line in report.NOT_MEASURED)
    assert not re.search(r"\d+\s*(GB/s|GiB|MiB|KiB|us|µs|%)", prose)
    empty = report.render_report({}, results)
    assert "No results yet" in empty


def test_device_clock_keeps_host_waits_out_of_the_interval(monkeypatch):
    """The opening call drains the device BEFORE recording; the closing call records BEFORE waiting,
    so neither the host's wake-up nor pytest-benchmark's own work between calls lands in the interval."""
    import sys
    import types

    log: list[tuple] = []
    gpu = {"ms": 0.0}

    class Event:
        def __init__(self, enable_timing: bool = False):
            assert enable_timing
            self.ms = None

        def record(self):
            log.append(("record", self))
            self.ms = gpu["ms"]

        def synchronize(self):
            log.append(("event_sync", self))

        def elapsed_time(self, end):
            return end.ms - self.ms

    cuda = types.SimpleNamespace(Event=Event, synchronize=lambda: log.append(("device_sync",)))
    monkeypatch.setitem(sys.modules, "torch", types.SimpleNamespace(cuda=cuda))
    clock = C.DeviceClock(scale=0.5)
    assert clock() == 0.0
    assert [x[0] for x in log] == ["device_sync", "record"]
    gpu["ms"] += 4.0  # the target's device work
    log.clear()
    t = clock()
    assert [x[0] for x in log] == ["record", "event_sync"] and log[0][1] is log[1][1]
    assert clock.last == pytest.approx(4.0 / 1e3 * 0.5) and t == pytest.approx(clock.last)
    gpu["ms"] += 100.0  # between rounds: not counted
    clock()
    gpu["ms"] += 2.0
    assert clock() == pytest.approx((4.0 + 2.0) / 1e3 * 0.5)
    assert clock.last == pytest.approx(2.0 / 1e3 * 0.5)


def _row(layers, n, up, ours, verdict, ideal=None, ceiling=55.0):
    return {
        "layers": layers, "n": n, "us": {"upstream": up, "ours": ours}, "speedup": up / ours,
        "verdict": verdict, "ideal_us": ideal, "ceiling_gbps": ceiling,
    }


def test_targets_section_checks_each_target_from_the_rows():
    from bench import report

    rows = [
        _row(40, 0, 1.2, 1.1, "faster"),
        _row(40, 1, 38.0, 38.5, "slower"),
        _row(40, 2, 73.0, 72.0, "faster"),
        _row(40, 4, 145.0, 140.0, "faster", ideal=128.0),
        _row(16, 1, 38.0, 39.0, "slower"),  # not the 40-layer graph: ignored
        _row(4, 600, 20800.0, 20600.0, "faster", ideal=19000.0),
    ]
    data = {"x": {"bench": {"gather": rows, "machine": {"device_name": "Test GPU"}},
                  "ceiling": {"ring": [{"gather_gbps": 51.0}], "ldg": [{"gather_gbps": 50.0}]}}}
    text = "\n".join(report.targets_section(data))
    assert "Test GPU, 40-layer graph (n = 600: 4 layers)" in text
    assert "not met at n = 1 (0.987, slower)." in text
    assert "n = 4: 1.094x, n = 600: 1.084x." in text
    assert "reached 51.0 GB/s (93% of it): at that rate a copy takes 1.078x the ideal before any fixed cost." in text
    # one expert: 72.0 - 38.5 = 33.5 us streaming, 38.5 - 33.5 = 5.0 us fixed; 1.05x needs 38.0 / 1.05
    assert "33.5 µs of streaming (n = 2 minus n = 1) plus 5.0 µs fixed, 1.10 µs of which" in text
    assert f"needs {38.0 / 1.05:.1f} µs, i.e. a fixed part of {38.0 / 1.05 - 33.5:.1f} µs" in text
    rows[1] = _row(40, 1, 38.0, 37.9, "tie")
    assert "Speedup >= 1.00 at every n: met at every n." in "\n".join(report.targets_section(data))
    assert report.targets_section({"y": {}}) == []


def test_decode_step_note_reads_the_ratio_against_its_aa_control():
    from bench import report

    d = {"rounds_us": {"unset": [100.0, 110.0], "tma": [101.0, 108.0]}, "speedup": 0.99, "verdict": "tie"}
    old = report.decode_step_note(d)
    assert "0.990-1.019 over 2 rounds (not resolved: the range spans 1.0)" in old and "no A/A control" in old
    new = report.decode_step_note({**d, "aa_spread": 0.02})
    assert "spreads ±0.020, so the median ratio 0.990 is a tie." in new and "no A/A" not in new
