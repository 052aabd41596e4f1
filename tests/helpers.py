"""What the CPU tests share besides fixtures (those are tests/conftest.py's): the overlay's CLI and git run as a user
would, a base repository, a project checkout's commit; a synthetic results tree (clearly labelled) for the report.
Imported as ``helpers`` (tests/ is on sys.path, as pytest puts a test directory without ``__init__.py``)."""

from __future__ import annotations

import argparse as _ap
import functools
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from bench import sweep
from bench.e2e import synth
from suite.commands import MEASUREMENTS
from suite.geometry import NVFP4_EXPERT_BYTES
from suite.results import write_json as write
from suite.stats import Comparison, median, paired_rounds, verdict
from freetoken_overlay import util as overlay_util
from freetoken_overlay.pin import Pin, get_pin
from freetoken_overlay.util import NOX_COMMAND_ENV, NOX_ENV, NOX_RUN_ENV, REPO_ROOT, VERBOSE_ENV
from freetoken_overlay.workrepo import check_out_new_branch, init_repo, make_base_commit, series_branch

PIN = get_pin()
AUTHOR = {"GIT_AUTHOR_NAME": "Series Author", "GIT_AUTHOR_EMAIL": "author@example.com"}


def overlay(*args: str, workdir: Path, check: bool = True, env: dict[str, str] | None = None):
    """Run ``python -m freetoken_overlay args...`` (as outside nox, unless ``env`` says); the completed process."""
    outer = {k: v for k, v in os.environ.items() if k not in (NOX_ENV, NOX_COMMAND_ENV, NOX_RUN_ENV, VERBOSE_ENV)}
    full_env = {**outer, "FT_OVERLAY_WORKDIR": str(workdir), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "freetoken_overlay", *args],
        cwd=REPO_ROOT, env=full_env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if check and proc.returncode != 0:
        pytest.fail(f"freetoken_overlay {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def git(repo: Path, *args: str, date: str | None = None, check: bool = True) -> str:
    env = {**os.environ, **AUTHOR, "GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@example.com"}
    if date:
        env["GIT_AUTHOR_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True,
                          check=check).stdout.strip()  # fmt: skip


def make_base_repo(pin: Pin, files: dict[str, bytes], repo: Path) -> str:
    """A new repository ``repo`` holding the base commit (made as apply makes it), tagged
    ``upstream-<version>`` and checked out on the series branch; the commit's id."""
    branch = series_branch(pin)
    init_repo(repo, branch)
    commit = make_base_commit(repo, pin, files)
    overlay_util.git(repo, "tag", pin.tag, commit)
    check_out_new_branch(repo, branch, commit)
    return commit


def commit_project(patches: Path, message: str = "patches") -> None:
    """Commit ``patches`` in its project's git, as a contributor does after an export."""
    git(patches.parent, "add", "-A", ".")
    git(patches.parent, "commit", "-q", "--allow-empty", "-m", message)


def read_dir(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.patch"))}


def write_synthetic_results(root: Path) -> None:
    """A complete synthetic results/<device>/ tree (clearly labelled) for the CPU smoke path."""

    slug = "synthetic-gpu"
    d = root / slug
    machine = {
        "device_name": "Synthetic GPU (dry run)",
        "device_slug": slug,
        "capability": "9.0",
        "driver": "0.0",
        "pcie_gen_current": "5",
        "pcie_width_current": "16",
        "torch": "0.0",
        "torch_cuda": "0.0",
        "freetoken": "0.0+dry",
        "series_hash": "000000000000",
    }
    write(d / MEASUREMENTS["bench"].file, bench_store(synthetic_bench_run(machine)))
    write(d / "step_pdl.json", synthetic_step_pdl(machine))
    write(d / "series_bench.json", synthetic_series_bench(machine))
    args = _ap.Namespace(flat_bytes="64M", gather_n=32)
    ring_list = sweep.parse_rings([4, 16, 64], "4x8K,4x16K")
    ceiling = sweep.synthetic(args, ring_list, [4, 8], [1 << 20, 64 << 20], 96 * 1024)
    ceiling["summary"] = sweep.summarize(ceiling)
    ceiling["machine"] = machine
    ceiling["provenance"] = {"series_hash": "000000000000", "tree": None}  # synthetic: of no tree, wherever it runs
    write(d / MEASUREMENTS["sweep"].file, ceiling)
    summary = {
        "synthetic": True,
        "passed": True,
        "duration_s": 100,
        "machine": machine,
        "groups": {"gather_exact": {"calls": 1202, "bytes": 10**11, "tests": {"passed": 20}}},
        "totals": {
            "verified_calls": 1202,
            "verified_bytes": 10**11,
            "upstream_control_calls": 6,
            "tests": {"passed": 20},
        },
        "failures": [],
    }
    write(d / MEASUREMENTS["gpu"].file, summary)
    write(
        d / MEASUREMENTS["sanitize"].file,
        {
            "synthetic": True,
            "passed": True,
            "tools": {
                t: {"errors": 0, "warnings": 0, "case_exact": True} for t in ("memcheck", "racecheck", "synccheck")
            },
        },
    )


def synthetic_bench_run(machine: dict) -> dict:
    """The benchmark's rows as :class:`suite.models.BenchRun` holds them (``to_doc``): tma 1.2x faster at n = 0
    and a tie elsewhere, a decode step 1.007 faster (A/A spread 0.01); :func:`bench_store` saves them."""
    rows = []
    for layers, ns in ((40, (0, 1, 2, 8)), (16, (1, 4)), (4, (600,))):
        for n in ns:
            up = 1.4 + 36.0 * n
            tma = up / (1.2 if n == 0 else 1.0)
            rounds = {"upstream": [up] * 5, "upstream_aa": [up * 1.004] * 5, "tma": [tma] * 5,
                      **({"copy_engine": [up * 1.3] * 5} if n else {})}  # fmt: skip
            c = paired_rounds(rounds["upstream"], rounds["tma"], rounds["upstream_aa"])
            rows.append({"regime": "replay", "layers": layers, "n": n, "bytes_per_layer": n * NVFP4_EXPERT_BYTES,
                         "us": {k: median(v) for k, v in rounds.items()}, "ratio": {"tma": c.to_doc()}})  # fmt: skip
    step = {"layers": 40, "cache_slots": 1920, "miss_rate": 0.1, "misses_per_step": 32.0,
            "us_per_step": {"upstream": 1500.0, "tma": 1490.0},
            "ratio": {"tma": Comparison(1.007, None, 1500 / 1490, 1502 / 1492, 0.01, verdict=verdict(1.007, 0.01)).to_doc()},
            "rounds_us": {"upstream": [1500.0, 1502.0], "tma": [1490.0, 1492.0]}, "ideal_copy_us_per_step": 1075.0,
            "zipf_exponent": 1.5, "modelled_miss_rate": 0.1, "top_k": 8, "batch": 1, "rounds": 7,
            "steps_per_round": 10, "note": "synthetic"}  # fmt: skip
    return {"synthetic": True, "machine": machine, "provenance": {"series_hash": "000000000000", "tree": None},
            "tma_default_ring": {"ctas": 16, "stages": 4, "chunk_bytes": 8192},
            "upstream_kernel": {"num_threads": 1024, "blocks_per_bank": 8},
            "geometry": {"bytes_per_expert": NVFP4_EXPERT_BYTES}, "method": {"rounds": 5},
            "ceiling": {"start": {"gbps": 53.0, "bytes": 256 << 20, "reps": 10}, "end": {"gbps": 52.9}},
            "verified": {"timed_sets": 123, "bytes": 10**10}, "gather": rows, "decode_step": step}  # fmt: skip


def _records(regime: str, layers: int, n, nbytes: int, paired: dict) -> list[dict]:
    return [{"name": f"test_gather[{regime}-{layers}-{n}-{k}]", "fullname": f"bench/test_bench_gather.py::test_gather[{k}]",
             "params": {"regime": regime, "layers": layers, "n": n, "kernel": k},
             "extra_info": {"paired": paired, "bytes": nbytes}} for k in paired["median_us"]]  # fmt: skip


def bench_store(run: dict) -> dict:
    """The pytest-benchmark store (kind ``benchmark``) that :meth:`suite.models.BenchRun.read` reads back into
    ``run``'s rows (a :func:`synthetic_bench_run`, edited or not): one record per kernel of every case."""
    benchmarks = []
    for r in run["gather"]:
        paired = {"ratio": r["ratio"], "aa_spread": r["ratio"]["tma"]["aa_spread"], "median_us": r["us"]}
        benchmarks += _records(r.get("regime") or "replay", r["layers"], r["n"], r["bytes_per_layer"] * r["layers"], paired)
    step = run.get("decode_step")
    if step:
        extra = {k: step[k] for k in ("steps_per_round", "miss_rate", "misses_per_step", "zipf_exponent", "modelled_miss_rate",
                                      "cache_slots", "top_k", "batch", "ideal_copy_us_per_step", "note") if k in step}  # fmt: skip
        paired = {"median_us": step["us_per_step"], "rounds_us": step["rounds_us"], "ratio": step["ratio"],
                  "rounds": step["rounds"], **extra}
        benchmarks += _records("step", step["layers"], 0, 32 * NVFP4_EXPERT_BYTES, paired)
    info = {"ceiling": run["ceiling"], "kernel": {"tma_default_ring": run["tma_default_ring"], "upstream": run["upstream_kernel"]},
            "geometry": run["geometry"], "method": run["method"], "verified": run["verified"]}  # fmt: skip
    return {"schema": MEASUREMENTS["bench"].schema, "synthetic": run.get("synthetic", False),
            "machine_info": {"gpu": run["machine"]}, "provenance": run["provenance"], "decode_gather": info,
            "benchmarks": benchmarks}  # fmt: skip


def _breakdown(gap: float) -> dict:
    mean = {"ensure_us": 3.3, "gap_us": gap, "copy_us": 30.0}
    return {"calls": 400, "steps": 10, "mean_us": mean, "median_us": mean,
            "per_step_us": {k: v * 40 for k, v in mean.items()}}  # fmt: skip


def synthetic_step_pdl(machine: dict) -> dict:
    """A step_pdl document: a longer gap with PDL, per-layer PDL faster at n = 0 only."""
    step = {
        "cache_slots": 1920, "zipf_exponent": 1.5, "modelled_miss_rate": 0.1, "misses_per_step": 32.0,
        "breakdown": {"upstream": _breakdown(0.41), "upstream_aa": _breakdown(0.42), "tma": _breakdown(0.40),
                      "tma_pdl": _breakdown(0.67), "upstream_pdl": _breakdown(0.66)},
    }  # fmt: skip
    per_layer = {str(n): {"median_us": {"upstream": 1.4 + 36 * n}, "aa_spread": 0.02,
                          "ratio": {"tma": 1.0, "tma_pdl": 1.5 if n == 0 else 1.0, "upstream_pdl": 1.0}}
                 for n in (0, 1, 2)}  # fmt: skip
    return {"schema": "freetoken-decode-gather-step-pdl/1", "synthetic": True, "machine": machine,
            "provenance": {"series_hash": "000000000000", "tree": None}, "decode_step": step, "per_layer": per_layer}


def synthetic_series_bench(machine: dict) -> dict:
    """An series_bench document: 32 blocks per bank faster at n >= 1 and slower at n = 0, tma a tie."""
    rows = [{"n": n, "median_us": {"upstream": 1.3 + 36 * n}, "aa_spread": 0.005, "verified_sets": 30,
             "ratio": {"upstream_bpb32": 0.9 if n == 0 else 1.02, "tma": 1.0}, "gbps": {"tma": 40.0 if n else None}}
            for n in (0, 1, 2)]  # fmt: skip
    return {"schema": "freetoken-decode-gather-series-bench/1", "synthetic": True, "machine": machine,
            "provenance": {"series_hash": "000000000000", "tree": None}, "expert_bytes": NVFP4_EXPERT_BYTES,
            "copy_engine_gbps": [53.0, 52.9], "rows": rows, "failures": [],
            "args": {"layers": 40, "quant_format": "nvfp4", "rounds": 9, "blocks_per_bank": [32]}}


def pytest_junit(cwd: Path, report: Path, *args: str, pythonpath: str | None = None) -> tuple[dict, ET.Element, str]:
    """pytest in a child process at ``cwd`` with a JUnit ``report``: its counts (``exit``: pytest's exit code),
    the ``testsuite`` element and the output's tail; no report at all fails the calling test."""
    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    if pythonpath:
        env["PYTHONPATH"] = os.pathsep.join(p for p in (pythonpath, env.get("PYTHONPATH", "")) if p)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", f"--junitxml={report}", *args]
    proc = subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    tail = (proc.stdout + proc.stderr)[-4000:]
    assert report.is_file(), f"pytest wrote no report (exit {proc.returncode}):\n{tail}"
    suite = ET.parse(report).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["exit"] = proc.returncode
    return counts, suite, tail

# --------------------------------------------------------------------------- the end-to-end harness's tests


def fake_result(tps: float, sha: str = "a" * 64, misses: int = 100, **kw) -> dict:
    return {
        "tokens_per_s": tps, "ttft_s": 0.5, "misses_per_token": 9.5, "miss_rate": 0.1, "misses_total": misses,
        "ids_sha256": sha, "copy_kernel": "k", "load_s": 20.0, "vram_peak_reserved_bytes": 10 << 30,
        "vram_device_used_bytes": 11 << 30, "machine": {"device_name": "Fake GPU", "device_slug": "fake-gpu"}, **kw,
    }  # fmt: skip


def make_model_dir(tmp_path, with_sidecar=True):
    spec = synth.SynthSpec.tiny()
    d = tmp_path / "model"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(synth.config_json(spec, eos_token_id=256)))
    if with_sidecar:
        table = [[16, 0.6], [32, 0.35], [48, 0.12], [64, 0.0]]
        (d / synth.SIDECAR).write_text(json.dumps({"schema": synth.SIDECAR_SCHEMA, "spec": spec.to_json(),
                                                   "miss_table": table}))  # fmt: skip
    return d


def upstream_launcher(bpb: int):  # the launchers the series' switch makes: partials of the kernels' entry points
    return functools.partial(print, blocks_per_bank=bpb)


def ring_launcher(ctas: int, stages: int, chunk_bytes: int):
    return functools.partial(print, ctas=ctas, stages=stages, chunk_bytes=chunk_bytes)
