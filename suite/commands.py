"""Every command the documentation, the report templates and the noxfile name, in one place.

Each command is an argument list (what nox runs) and prints as one shell line (what the docs and
the report show), so the two cannot drift apart. Where the files go is ``suite.results``' concern.
Stdlib only: the noxfile imports this module from nox's own Python.
"""

from __future__ import annotations

import shlex
from typing import NamedTuple


class Command(NamedTuple):
    session: str | None  # the nox session that runs it (None: not a session of its own)
    args: tuple[str, ...]  # after ``python -m`` where ``module`` is true
    module: bool = True
    note: str = ""

    @property
    def line(self) -> str:
        return shlex.join((("python", "-m") if self.module else ()) + self.args)

    @property
    def nox(self) -> str | None:
        return f"nox -s {self.session}" if self.session else None


#: ``nox -s gpu`` sets it to 1: the GPU tier then writes its ``conformance`` document (suite.results).
CONFORMANCE_SUMMARY_ENV = "CONFORMANCE_SUMMARY"

GPU = Command("gpu", ("pytest", "-rs", "conformance/gpu"), note=f"{CONFORMANCE_SUMMARY_ENV}=1")
#: ``nox -s gpu`` then runs the series' upstream tests again with FREETOKEN_DISABLE_JIT=1 (every kernel prebuilt).
SERIES_NO_JIT = Command(None, ("pytest", "-rs"), note="FREETOKEN_DISABLE_JIT=1, the series' upstream tests")
SANITIZE = Command("sanitize", ("conformance.gpu.run_sanitizer",))
#: pytest-benchmark times every kernel with the device clock; --bench-store saves its JSON as the store
#: (results/<device>/pytest-benchmark.json, bench/conftest.py).
BENCH = Command("bench", ("pytest", "-rs", "bench/test_bench_gather.py", "--benchmark-timer=gpukit.timing.device_clock",
                          "--bench-store"))  # fmt: skip
#: pytest-benchmark's own table of a saved run (DEVICE: a results/ directory such as h200), one group per case.
PYTEST_BENCHMARK_COMPARE = Command(None, ("pytest-benchmark", "compare", "results/DEVICE/pytest-benchmark.json",
                                          "--group-by=param:regime,param:layers,param:n"), module=False)  # fmt: skip
SWEEP = Command("sweep", ("bench.sweep",), note="--quick: ~1 min")
REPORT = Command("report", ("report",))
SASS = Command("sass", ("conformance.sass", "--arch", "80,90,100,120", "--save", "--check"))
COMPARE = Command("compare", ("report.compare",), note="upstream, A/A and tma per (regime, layers, n), with the paired verdict")
#: The benchmark the series adds to upstream's tree: one command to measure another host.
SERIES_BENCH = Command(None, ("benchmarks/bench_decode_gather.py",), module=False)
#: ``nox -s series_bench`` runs it from .work/upstream and keeps its JSON with the results.
SERIES_BENCH_RUN = Command("series_bench", ("bench.series_bench",), note="the series' benchmark")
STEP = Command("step", ("bench.step_pdl",), note="decode-step breakdown and PDL A/B")
CONTENTION = Command("contention", ("bench.contention",), note="needs two GPUs")
#: The end-to-end A/B through FreeToken's engine; ``--model PATH`` comes from the caller.
E2E = Command("e2e", ("bench.e2e", "run"), note="needs --model PATH")
#: The offline checkpoint it runs on (``DIR`` from the caller; weights drawn on the GPU).
E2E_CHECKPOINT = Command(None, ("bench.e2e", "make-checkpoint"), note="DIR [--layers N]")

#: The GPU sessions, in the order of a full run on a GPU machine.
GPU_RUN = (GPU, SANITIZE, BENCH, SWEEP, SERIES_BENCH_RUN, STEP, CONTENTION)


def series_bench_line() -> str:
    return "python " + shlex.join(SERIES_BENCH.args)
