"""pytest configuration of the benchmarks (bench/README.md): a skip with the reason for every GPU benchmark
where there is no CUDA device, the device clock's precision for pytest-benchmark, the run-wide facts in
the saved JSON, and ``--bench-store`` (the JSON into ``results/<device>/``). Markers are registered in
pyproject.toml."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from suite import results
from suite.commands import MEASUREMENTS
from gpukit.skips import cuda_skip_reason
from gpukit.timing import RESOLUTION_S, device_clock

log = logging.getLogger("bench")

#: pytest's stash key of the run-wide facts the benchmark module leaves for the saved JSON.
RUN_INFO = pytest.StashKey[dict]()


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--bench-store", action="store_true",
        help=f"write pytest-benchmark's JSON to results/<device>/{MEASUREMENTS['bench'].file} (suite.results), "
        "atomically, once the run has finished (nox -s bench passes it)",
    )  # fmt: skip


class StoreFile:
    """What ``--benchmark-json`` holds under ``--bench-store``: pytest-benchmark writes its JSON to a
    temporary file beside the store (opened by path in pytest-benchmark 5.3, used as an open file before),
    and :meth:`finish`, after pytest-benchmark has saved, puts it in place only when no test failed (a
    failed run leaves the store as it was and says so)."""

    def __init__(self, target: Path):
        self.target = target
        self.tmp = target.with_suffix(target.suffix + ".tmp")
        self.failed: list[str] = []  # node ids of failed tests (pytest_runtest_logreport)
        self.note = ""  # what the terminal summary says when the store was kept

    def __fspath__(self) -> str:
        self.target.parent.mkdir(parents=True, exist_ok=True)
        return str(self.tmp)

    def __enter__(self):
        self._fh = open(self, "wb")
        return self._fh

    def __exit__(self, exc_type, exc, tb) -> None:
        self._fh.close()

    def finish(self) -> None:
        if not self.tmp.is_file():
            return
        if not self.failed:
            results.supersede("bench", self.target)  # the run it replaces goes to the history
            self.tmp.replace(self.target)
            return
        self.tmp.unlink()
        self.note = (f"--bench-store: {len(self.failed)} test(s) failed ({self.failed[0]}, ...): {self.target} "
                     "left as it was (the JSON pytest-benchmark says it wrote was discarded)")  # fmt: skip
        log.error(self.note)

    def __str__(self) -> str:
        return str(self.target)


def pytest_configure(config: pytest.Config) -> None:
    # before pytest-benchmark's own pytest_configure (trylast), which reads --benchmark-json
    if config.getoption("bench_store", False):
        if config.getoption("benchmark_json", None) is not None:
            raise pytest.UsageError("--bench-store and --benchmark-json both name where the JSON goes: give one")
        config.option.benchmark_json = store = StoreFile(results.path("bench"))
        _STORES.append(store)
    try:
        from pytest_benchmark.fixture import BenchmarkFixture
    except ImportError as exc:
        raise pytest.UsageError(f"bench/ needs pytest-benchmark (pyproject.toml's test group): {exc}") from exc

    # pytest-benchmark measures a timer's precision by reading it for a second (a device sync per read
    # here); the clock's precision is the events' resolution, so it never spins on it
    BenchmarkFixture._precisions[device_clock] = RESOLUTION_S


_STORES: list[StoreFile] = []


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    if report.failed:
        for store in _STORES:
            store.failed.append(report.nodeid)


def pytest_sessionfinish(session: pytest.Session) -> None:
    # after pytest-benchmark's hook wrapper has saved the JSON (it saves before it yields)
    for store in _STORES:
        store.finish()


def pytest_terminal_summary(terminalreporter) -> None:
    for store in _STORES:
        if store.note:
            terminalreporter.write_line(store.note, red=True)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if item.get_closest_marker("gpu") is None:
            continue
        if reason is None:
            reason = cuda_skip_reason() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"GPU benchmark: {reason}"))


def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    info = config.stash.get(RUN_INFO, {})
    if info.get("machine"):
        machine_info["gpu"] = info["machine"]


def pytest_benchmark_update_json(config: pytest.Config, benchmarks, output_json: dict[str, Any]) -> None:
    """The schema id and provenance at the top (as every result document has, suite.results), and the
    run-wide facts (kernels, geometry, copy-engine ceiling, method, verification) under ``decode_gather``;
    machine paths scrubbed."""
    info = config.stash.get(RUN_INFO, None)
    output_json["schema"] = MEASUREMENTS["bench"].schema
    output_json["provenance"] = (info or {}).get("provenance") or results.provenance()
    if info is not None:
        output_json["decode_gather"] = {k: v for k, v in info.items() if k not in ("machine", "provenance")}
    output_json.update(results.scrub({k: v for k, v in output_json.items() if k != "benchmarks"}))
