"""GPU conformance tier for the decode-gather kernel (see conformance/gpu/README.md).

Every test here is marked ``gpu`` and ``slow`` and is skipped, with the reason, where there is no
CUDA device (or no torch). On a CUDA machine the installed ``freetoken`` must provide
``freetoken.kernel.decode_gather``: a missing module is an error there, not a skip.

With ``CONFORMANCE_SUMMARY=1`` (``nox -s gpu`` sets it) the session writes the ``gpu``
document (``suite.results``: ``results/<device>/conformance/gpu.json``): verified calls and
bytes per group, pass/fail counts per group, the machine and the provenance.
"""

from __future__ import annotations

import collections
import dataclasses
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from freetoken_overlay.util import env_flag

from conformance.prereq import skip_or_fail  # noqa: E402
from suite import results
from suite.commands import CONFORMANCE_SUMMARY_ENV as SUMMARY_ENV
from suite.models import Gpu
from suite.geometry import CONFORMANCE_EXTRA_RINGS, Ring
from gpukit.launch import default_ring, load_kernels, precompile
from gpukit.machine import machine_info
from gpukit.memory import sync
from gpukit.skips import NO_TORCH, cuda_skip_reason

HERE = Path(__file__).resolve().parent
# Self-test hook for the suite's OWN logic on a CPU: a Python file whose ``load()`` returns stand-ins
# for (decode_gather module, fast_index_copy module). It proves nothing about the kernels and never
# writes a summary; tests that need CUDA graphs, the offload cache or a subprocess skip under it.
SELFTEST_ENV = "CONFORMANCE_SELFTEST_KERNELS"


# ---------------------------------------------------------------------------
# Session state: verified calls/bytes and outcomes per group (group = test module)
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class _Session:
    started: float = dataclasses.field(default_factory=time.time)
    counts: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(collections.Counter))
    outcomes: dict = dataclasses.field(default_factory=lambda: collections.defaultdict(collections.Counter))
    notes: dict = dataclasses.field(default_factory=dict)
    failures: list = dataclasses.field(default_factory=list)
    env: Any = None


SESSION = _Session()


def _group_of(nodeid: str) -> str:
    stem = Path(nodeid.split("::", 1)[0]).stem
    return stem.removeprefix("test_gpu_").removeprefix("test_")


def _in_tier(path: Path) -> bool:
    try:
        path.resolve().relative_to(HERE)
        return True
    except ValueError:
        return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    for item in items:
        path = Path(str(item.fspath))
        if _in_tier(path) and not path.name.startswith("test_tooling"):
            item.add_marker(pytest.mark.gpu)
            item.add_marker(pytest.mark.slow)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if not _in_tier(Path(report.fspath)) or Path(report.fspath).name.startswith("test_tooling"):
        return
    group = _group_of(report.nodeid)
    if report.when == "call" or (report.when == "setup" and not report.passed):
        outcome = "error" if (report.when == "setup" and report.failed) else report.outcome
        SESSION.outcomes[group][outcome] += 1
        if report.failed:
            SESSION.failures.append(report.nodeid)


# ---------------------------------------------------------------------------
# The device
# ---------------------------------------------------------------------------


@dataclasses.dataclass
class GpuEnv:
    torch: Any
    device: Any
    decode_gather: Any  # freetoken.kernel.decode_gather
    fast_index_copy: Any  # freetoken.kernel.fast_index_copy
    capability: tuple[int, int]
    ring: Ring  # the module default
    fake: bool

    @property
    def rings(self) -> dict[str, Ring]:
        return {"default": self.ring, **{str(r): r for r in CONFORMANCE_EXTRA_RINGS}}

    def sync(self) -> None:
        sync(self.device)


def _load_selftest(path: str):
    spec = importlib.util.spec_from_file_location("_conformance_selftest_kernels", path)
    mod = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(mod)
    return mod.load()


@pytest.fixture(scope="session")
def gpu() -> GpuEnv:
    """The CUDA device, both kernel modules, and every ring of the tier JIT-built up front."""
    if SESSION.env is not None:
        return SESSION.env
    try:
        import torch
    except ImportError as e:
        skip_or_fail(NO_TORCH.format(error=e))
    selftest = os.environ.get(SELFTEST_ENV)
    if selftest:
        decode_gather, fast_index_copy = _load_selftest(selftest)
        env = GpuEnv(torch, torch.device("cpu"), decode_gather, fast_index_copy, (0, 0), default_ring(decode_gather), True)
        SESSION.env = env
        return env
    reason = cuda_skip_reason()
    if reason:
        skip_or_fail(f"{reason}: GPU tier skipped")
    try:
        decode_gather, fast_index_copy = load_kernels()
    except Exception as e:  # on a CUDA machine this is a broken install, not a skip
        pytest.fail(f"freetoken.kernel.decode_gather / fast_index_copy not importable: {e!r}", pytrace=False)
    if fast_index_copy._skip_fast_index_copy_enabled():  # upstream's own reading of the variable
        pytest.fail(f"{fast_index_copy.SKIP_FAST_INDEX_COPY_ENV} is set: both kernels skip their copies; unset it", pytrace=False)
    device = torch.device("cuda", torch.cuda.current_device())
    cap = torch.cuda.get_device_capability(device)
    ring = default_ring(decode_gather)
    t0 = time.perf_counter()
    errors = precompile(
        decode_gather, fast_index_copy, [ring, *CONFORMANCE_EXTRA_RINGS], progress=lambda m: print(f"[conformance] {m}", file=sys.stderr)
    )
    SESSION.notes["jit_seconds"] = round(time.perf_counter() - t0, 1)
    SESSION.notes["jit_errors"] = errors
    env = GpuEnv(torch, device, decode_gather, fast_index_copy, cap, ring, False)
    SESSION.env = env
    return env


@pytest.fixture(scope="session")
def real_gpu(gpu: GpuEnv) -> GpuEnv:
    """A real CUDA device (CUDA graphs, the offload cache, subprocesses): skipped under the CPU self-test."""
    if gpu.fake:
        pytest.skip("needs a real CUDA device (CPU self-test mode)")
    return gpu


@pytest.fixture(scope="session")
def sm90(real_gpu: GpuEnv) -> GpuEnv:
    """TMA-specific checks: the bulk-copy path and the cache switch exist only on sm_90 and newer."""
    if real_gpu.capability < (9, 0):
        skip_or_fail(f"needs sm_90+ for the TMA path, device is sm_{real_gpu.capability[0]}{real_gpu.capability[1]}")
    return real_gpu


@pytest.fixture
def tally(request: pytest.FixtureRequest):
    """``tally(calls=1, nbytes=...)`` adds byte-verified decode_gather calls and the bytes they
    moved to this test module's group (``kernel="upstream"`` counts control calls separately);
    ``tally.note(key, value)`` records a fact for the summary."""
    group = _group_of(request.node.nodeid)

    def add(calls: int = 1, nbytes: int = 0, kernel: str = "tma") -> None:
        prefix = "" if kernel == "tma" else f"{kernel}_"
        SESSION.counts[group][f"{prefix}calls"] += int(calls)
        SESSION.counts[group][f"{prefix}bytes"] += int(nbytes)

    def note(key: str, value: Any) -> None:
        SESSION.notes.setdefault(group, {})[key] = value

    add.note = note  # type: ignore[attr-defined]
    return add


# ---------------------------------------------------------------------------
# gpu.json
# ---------------------------------------------------------------------------


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    env = SESSION.env
    if env is None or not env_flag(SUMMARY_ENV):  # the overlay's one boolean parser: "false" is off too
        return
    ran = sum(c["passed"] + c["failed"] + c["error"] for c in SESSION.outcomes.values())
    if env.fake or ran == 0:
        print(f"\n[conformance] {SUMMARY_ENV} set but no GPU test ran here: no summary written", file=sys.stderr)
        return
    info = machine_info()
    groups = {}
    for g in sorted(set(SESSION.counts) | set(SESSION.outcomes)):
        counts = {"calls": 0, "bytes": 0, **SESSION.counts.get(g, {})}
        groups[g] = {**counts, "tests": dict(SESSION.outcomes.get(g, {}))}
    totals = {
        "verified_calls": sum(v["calls"] for v in SESSION.counts.values()),
        "verified_bytes": sum(v["bytes"] for v in SESSION.counts.values()),
        "upstream_control_calls": sum(v["upstream_calls"] for v in SESSION.counts.values()),
        "tests": dict(sum((collections.Counter(c) for c in SESSION.outcomes.values()), collections.Counter())),
    }
    summary = Gpu(
        exitstatus=int(exitstatus),
        passed=int(exitstatus) == 0 and not SESSION.failures,
        duration_s=round(time.time() - SESSION.started, 1),
        groups=groups,
        totals=totals,
        failures=SESSION.failures,
        notes=SESSION.notes,
        default_ring=env.ring._asdict(),
        extra_rings=[r._asdict() for r in CONFORMANCE_EXTRA_RINGS],
        command=" ".join(sys.argv),
    )
    path = results.save("gpu", machine=info, **summary.to_doc())
    print(f"\n[conformance] wrote {path}", file=sys.stderr)
