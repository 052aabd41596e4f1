"""The benchmark's timer and store on the CPU: the device clock on a fake event source, a SYNTHETIC
pytest-benchmark run made by pytest-benchmark itself through the benchmark's own ``record`` and JSON hooks
(fake events, so no GPU; never written under results/), the regression gate failing a 10 % slower kernel,
``pytest-benchmark compare`` on the saved file, and the report and ``report.compare`` read from it."""

from __future__ import annotations

import copy
import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from suite import results
from suite.commands import MEASUREMENTS
from gpukit.timing import RESOLUTION_S, DeviceClock

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "results"


def f32(x: float) -> float:
    """``x`` as cudaEventElapsedTime returns it: a float32."""
    return struct.unpack("f", struct.pack("f", x))[0]


class FakeGPU:
    """A device timeline: events take the time they are recorded at; elapsed_time is float32 ms, as CUDA's."""

    def __init__(self, start_s: float = 0.0):
        self.now, self.log = start_s, []

    def event(self):
        gpu = self

        class Event:
            def record(self, stream=None):
                self.t, self.stream = gpu.now, stream
                gpu.log.append(("record", stream))

            def synchronize(self):
                gpu.log.append(("sync", self.t))

            def elapsed_time(self, later) -> float:
                return f32((later.t - self.t) * 1e3)

        return Event()


def test_device_clock_reads_device_time_between_events_on_the_timing_stream():
    gpu = FakeGPU(start_s=5_000.0)  # far from zero: a float32 offset from the start would lose µs here
    clock = DeviceClock(events=gpu.event, stream=lambda: "timing-stream")
    t0 = clock()
    gpu.now += 12.345e-6
    t1 = clock()
    gpu.now += 3600.0  # an hour later the differences are still the events' own
    t2 = clock()
    gpu.now += 0.5e-3
    t3 = clock()
    assert t0 == 0.0
    assert t1 - t0 == pytest.approx(f32(12.345e-3) / 1e3, rel=0, abs=1e-12)
    assert t3 - t2 == pytest.approx(f32(0.5) / 1e3, rel=0, abs=1e-12)
    assert abs((t3 - t2) - 0.5e-3) < RESOLUTION_S  # a float32 offset from t0 would be ~0.2 ms off here
    assert {s for what, s in gpu.log if what == "record"} == {"timing-stream"}
    assert [w for w, _ in gpu.log] == ["record", "sync"] * 4  # every read waits for its own event


# --------------------------------------------------------------------------- a synthetic pytest-benchmark run

SYNTHETIC_TEST = '''
"""SYNTHETIC benchmark run (tests/test_bench_store.py): fake device events, made-up per-layer times."""
import os, types
import pytest
from bench.conftest import RUN_INFO
from bench.test_bench_gather import Case, paired, record
from gpukit import timing
from suite.rounds import run_rounds

class GPU:
    now = 0.0

class Event:
    def record(self, stream=None): self.t = GPU.now
    def synchronize(self): pass
    def elapsed_time(self, later): return (later.t - self.t) * 1e3

timing.device_clock._events, timing.device_clock._stream = Event, (lambda: None)
SLOW = dict(x.split("=") for x in os.environ.get("SYN_SLOW", "").split(",") if x)
CASES = [("decode", 40, n) for n in (0, 1, 2, 4, 8, 32)] + [("replay", 40, n) for n in (0, 1, 32)] + [("step", 40, "zipf")]
KERNELS = ("upstream", "upstream_aa", "tma")
BYTES = 1781760

def us(regime, n, k):  # per layer (per step for the step)
    up = 1200.0 if regime == "step" else 1.4 + 36.0 * n + (2.0 if regime == "decode" else 0.0)
    return up * {"upstream": 1.0, "upstream_aa": 1.002, "tma": 0.98}[k]

def make(regime, layers, n):
    timers = {k: (lambda r, k=k: us(regime, n, k) * (1 + 0.001 * (r % 3))) for k in KERNELS}
    rounds = run_rounds(timers, 7, base="upstream", aa="upstream_aa")
    nbytes = 32 * BYTES if regime == "step" else layers * n * BYTES
    step = {"steps_per_round": 10, "miss_rate": 0.1, "misses_per_step": 32.0, "zipf_exponent": 1.5,
            "modelled_miss_rate": 0.1, "cache_slots": 1920, "top_k": 8, "batch": 1, "ideal_copy_us_per_step": 1075.0}
    case = Case(regime, layers, n, nbytes, paired(rounds, **(step if regime == "step" else {})))
    for k in KERNELS:
        seconds = us(regime, n, k) * (1 if regime == "step" else layers) * 1e-6
        seconds *= float(SLOW.get(f"{regime}-{n}-{k}", 1.0))
        def advance(s=seconds): GPU.now += s
        case.plans[k] = {"target": advance, "rounds": 9, "warmup_rounds": 1}
    return case

@pytest.fixture(scope="module")
def totals(request):
    t = types.SimpleNamespace(count=lambda case, sets: None)
    yield t
    request.config.stash[RUN_INFO] = {"synthetic": True, "machine": {"device_name": "Synthetic GPU (fake events)"},
        "provenance": {"series_hash": "000000000000", "tree": None},
        "kernel": {"tma_default_ring": {"ctas": 16, "stages": 4, "chunk_bytes": 8192},
                   "upstream": {"num_threads": 1024, "blocks_per_bank": 8}},
        "geometry": {"bytes_per_expert": BYTES}, "method": {"rounds": 7},
        "ceiling": {"start": {"gbps": 53.0, "bytes": 1 << 28, "reps": 10}, "end": {"gbps": 52.9, "bytes": 1 << 28, "reps": 10}},
        "verified": {"timed_sets": 0, "bytes": 0}}

_cases = {}

@pytest.mark.parametrize("regime,layers,n,kernel", [pytest.param(r, l, n, k, id=f"{r}-L{l}-n{n}-{k}")
                                                    for r, l, n in CASES for k in KERNELS])
def test_gather(totals, benchmark, regime, layers, n, kernel):
    case = _cases.setdefault((regime, layers, n), make(regime, layers, n))
    record(totals, benchmark, case, kernel)
    assert os.environ.get("SYN_FAIL") != f"{regime}-{n}-{kernel}", "a failure the test asked for"
'''

def run_synthetic(where: Path, *args: str, slow: str = "", env: dict | None = None) -> subprocess.CompletedProcess:
    """pytest-benchmark over the SYNTHETIC test file in ``where``, with the benchmark's own conftest as a
    plugin (its hooks, ``--bench-store``) and its timer, gpukit.timing.device_clock.  No other installed plugin
    loads (hypothesis, xdist, anyio: half of each run's time)."""
    where.mkdir(parents=True, exist_ok=True)
    (where / "test_synthetic_bench.py").write_text(SYNTHETIC_TEST)
    outer = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # not an xdist worker itself
    env = {**outer, "SYN_SLOW": slow, "PYTHONPATH": str(REPO), "PYTEST_DISABLE_PLUGIN_AUTOLOAD": "1", **(env or {})}
    cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "pytest_benchmark.plugin",
           "-p", "bench.conftest", "--rootdir", str(where), str(where), "--benchmark-timer=gpukit.timing.device_clock",
           *args]  # fmt: skip
    return subprocess.run(cmd, cwd=where, env=env, capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def synthetic_run(tmp_path_factory) -> Path:
    """A SYNTHETIC pytest-benchmark JSON of the benchmark's format (in a temp dir, never results/)."""
    where = tmp_path_factory.mktemp("synthetic-bench")
    out = where / "pytest-benchmark.json"
    done = run_synthetic(where / "run", f"--benchmark-json={out}")
    assert done.returncode == 0, done.stdout + done.stderr
    return out


@pytest.mark.integration
def test_the_synthetic_run_is_pytest_benchmarks_own_with_the_paired_result(synthetic_run):
    pb = json.loads(synthetic_run.read_text())
    assert pb["decode_gather"]["synthetic"] is True and pb["machine_info"]["gpu"]["device_name"].startswith("Synthetic")
    assert pb["schema"] == MEASUREMENTS["bench"].schema and pb["provenance"]["series_hash"] == "000000000000"
    assert "device_clock" in pb["benchmarks"][0]["options"]["timer"]
    for b in pb["benchmarks"]:
        ex, p = b["extra_info"], b["params"]
        assert (ex["regime"], ex["layers"], ex["n"], ex["kernel"]) == (p["regime"], p["layers"], p["n"], p["kernel"])
        assert b["group"] == f"{p['regime']} L{p['layers']} n={p['n']}" and b["stats"]["rounds"] == 9
        layers = 1 if p["regime"] == "step" else p["layers"]
        # the fake events advanced by exactly the synthetic time: pytest-benchmark's median is that time
        expect = ex["paired"]["rounds_us"][p["kernel"]][0] * layers * 1e-6
        assert b["stats"]["median"] == pytest.approx(expect, rel=1e-9)
        c = ex["paired"]["ratio"]["tma"]
        assert c["ratio"] == pytest.approx(1 / 0.98) and (c["verdict"], c["rule"]) == ("faster", "aa")
        assert ex["paired"]["order"] == "alternate"


def slowed(pb: dict, name: str, factor: float = 1.10) -> dict:
    out = copy.deepcopy(pb)
    for b in out["benchmarks"]:
        if b["name"] == name:
            for k in ("min", "max", "mean", "median", "q1", "q3"):
                b["stats"][k] *= factor
    return out


def _committed_and_synthetic():
    return sorted(RESULTS.glob("*/bench.json")) + ["synthetic"]


@pytest.mark.integration
@pytest.mark.parametrize("source", _committed_and_synthetic(), ids=str)
def test_compare_fail_flags_one_kernel_slowed_by_10_percent(source, synthetic_run):
    """pytest-benchmark's own regression check (``--benchmark-compare-fail=median:5%``) over a run in the
    committed format and a copy with one kernel 10 % slower: that kernel fails, the rest pass."""
    from pytest_benchmark.utils import parse_compare_fail

    pb = json.loads((synthetic_run if source == "synthetic" else Path(source)).read_text())
    name = next(b["name"] for b in pb["benchmarks"] if b["params"]["kernel"] == "tma")
    check = parse_compare_fail("median:5%")
    now = slowed(pb, name)
    failed = [b["name"] for b, old in zip(now["benchmarks"], pb["benchmarks"]) if check.fails(b["stats"], old["stats"])]
    assert failed == [name]
    assert not [b for b in pb["benchmarks"] if check.fails(b["stats"], b["stats"])]


@pytest.mark.integration
def test_the_gate_fails_a_slower_run_and_passes_an_unchanged_one(synthetic_run, tmp_path):
    """``--benchmark-compare=<saved> --benchmark-compare-fail=median:5%`` (CONTRIBUTING's gate) end to end."""
    gate = [f"--benchmark-compare={synthetic_run}", "--benchmark-compare-fail=median:5%"]
    same = run_synthetic(tmp_path / "same", *gate)
    assert same.returncode == 0, same.stdout + same.stderr
    slow = run_synthetic(tmp_path / "slow", *gate, slow="decode-1-tma=1.10")
    assert slow.returncode != 0 and "Performance has regressed" in slow.stdout + slow.stderr
    assert "decode-L40-n1-tma" in slow.stdout + slow.stderr


@pytest.mark.integration
def test_bench_store_replaces_the_store_only_after_a_run_without_failures(tmp_path):
    """``--bench-store`` writes results/<device>/bench.json (suite.results) when every test
    passed, the run it replaces moved to the history; a run with a failed test leaves the store as it was."""
    env = {"FT_RESULTS_DIR": str(tmp_path / "results"), "FT_RESULTS_DEVICE": "synthetic-gpu"}
    store = tmp_path / "results" / "synthetic-gpu" / "bench.json"
    done = run_synthetic(tmp_path / "ok", "--bench-store", env=env)
    assert done.returncode == 0, done.stdout + done.stderr
    first = store.read_bytes()
    assert json.loads(first)["schema"] == MEASUREMENTS["bench"].schema
    failed = run_synthetic(tmp_path / "bad", "--bench-store", env={**env, "SYN_FAIL": "replay-1-tma"}, slow="decode-1-tma=2")
    assert failed.returncode == 1 and "left as it was" in failed.stdout + failed.stderr
    assert store.read_bytes() == first and not list(store.parent.glob("*.tmp"))
    again = run_synthetic(tmp_path / "again", "--bench-store", env=env)
    assert again.returncode == 0, again.stdout + again.stderr
    kept = store.parent / "history" / "series-000000000000" / "bench.1.json"  # the run it replaced
    assert kept.read_bytes() == first and store.read_bytes() != first
    both = run_synthetic(tmp_path / "both", "--bench-store", f"--benchmark-json={tmp_path / 'x.json'}", env=env)
    assert both.returncode != 0 and "give one" in both.stdout + both.stderr


@pytest.mark.integration
@pytest.mark.parametrize("source", _committed_and_synthetic(), ids=str)
def test_pytest_benchmark_compare_prints_upstream_aa_and_tma_per_case(source, synthetic_run):
    path = synthetic_run if source == "synthetic" else Path(source)
    done = subprocess.run([sys.executable, "-m", "pytest_benchmark", "compare", str(path),
                           "--group-by=param:regime,param:layers,param:n"], capture_output=True, text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0, done.stderr
    out = done.stdout + done.stderr
    pb = json.loads(path.read_text())
    for b in pb["benchmarks"]:
        p = b["params"]
        if p["regime"] != "step":
            assert f"regime={p['regime']} layers={p['layers']} n={p['n']}" in out
        assert f"-{p['kernel']}]" in out
    for kernel in ("upstream", "upstream_aa", "tma"):
        assert out.count(f"-{kernel}]") == len({(b["params"]["regime"], b["params"]["n"]) for b in pb["benchmarks"]})


@pytest.mark.integration
def test_the_report_and_compare_read_the_pytest_benchmark_store(synthetic_run, tmp_path, capsys):
    from report import compare
    from report.render import render

    base = tmp_path / "results"
    (base / "synthetic-gpu").mkdir(parents=True)
    (base / "synthetic-gpu" / "bench.json").write_text(synthetic_run.read_text())
    pb = json.loads(synthetic_run.read_text())
    pages = render(base)
    rep = pages["REPORT.md"]
    assert "From `synthetic-gpu/bench.json` (pytest-benchmark" in rep
    by = {(b["params"]["regime"], b["params"]["n"], b["params"]["kernel"]): b for b in pb["benchmarks"]}
    b = by[("decode", 4, "tma")]
    ex = b["extra_info"]["paired"]
    row = (f"| 4 | {7_127_040 / 2**20:.1f} MiB | {ex['median_us']['upstream']:,.2f} | {ex['median_us']['tma']:,.2f} | "
           f"{ex['ratio']['tma']['ratio']:.3f} | ±{ex['aa_spread']:.3f} | faster |")  # fmt: skip
    assert row in rep, rep
    pbs = " / ".join(f"{by[('decode', 4, k)]['stats']['median'] / 40 * 1e6:,.2f}" for k in ("upstream", "upstream_aa", "tma"))
    assert f"| {pbs} |" in rep
    assert compare.main(["--results", str(base)]) == 0
    out = capsys.readouterr().out
    assert "synthetic-gpu/bench.json" in out.splitlines()[0] and "pytest-benchmark medians" in out
    line = next(x.split() for x in out.splitlines() if x.startswith("decode ") and x.split()[2] == "4")
    assert line[3:6] == [f"{by[('decode', 4, k)]['stats']['median'] / 40 * 1e6:,.3f}" for k in ("upstream", "upstream_aa", "tma")]
    assert line[6:] == [f"{ex['ratio']['tma']['ratio']:.3f}", f"±{ex['aa_spread']:.3f}", "faster"]
    assert any(x.startswith("decode step") for x in out.splitlines())


def test_the_timing_entry_times_each_rounds_reps_between_two_events_after_its_before_hook():
    """gpukit.timing.bench: warm-up calls untimed; per round, ``before`` then a device sync, ``reps`` calls
    between two events, ``after``; one figure per round, the device time of its reps together."""
    from gpukit.timing import bench

    gpu, calls = FakeGPU(), []

    def fn():
        gpu.now += 1e-3 * (1 + len(calls) % 2)  # 1 ms, 2 ms, 1 ms, ...
        calls.append(gpu.now)

    hooks = []
    got = bench(fn, warmup=3, reps=2, rounds=4, before=lambda i: hooks.append(("before", i, len(calls))),
                after=lambda i: hooks.append(("after", i, len(calls))), events=gpu.event,
                sync=lambda: gpu.log.append(("device sync", None)))  # fmt: skip
    assert len(calls) == 3 + 4 * 2
    assert got == pytest.approx([f32(3.0) / 1e3] * 4)  # each round: one 1 ms and one 2 ms call
    assert hooks == [h for i in range(4) for h in (("before", i, 3 + 2 * i), ("after", i, 5 + 2 * i))]
    assert [w for w, _ in gpu.log] == ["device sync", "record", "record", "sync"] * 4
    assert bench(fn, events=gpu.event, sync=lambda: None) == pytest.approx([f32(2.0) / 1e3])  # one call, one round
