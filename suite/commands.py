"""The one table of measurements, and every other command the documentation, the report and the noxfile name.

Each measurement is one row of :data:`MEASUREMENTS` under one name, at once its nox session, its document
kind (``suite.results.save(NAME, ...)``), its file stem and its schema id (``freetoken-decode-gather-NAME/<v>``);
the row also names its model, its words on the pages, what its session needs and which module runs it. A
command is an argument list (what nox runs) that prints as one shell line (what the pages show). Stdlib only.
"""

from __future__ import annotations

import shlex
from typing import NamedTuple

from suite.kernels import SWITCH_ENV

SCHEMA_PREFIX = "freetoken-decode-gather-"
#: ``nox -s gpu`` sets it to 1: the GPU tier then writes its ``gpu`` document (suite.results).
CONFORMANCE_SUMMARY_ENV = "CONFORMANCE_SUMMARY"


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


class Measurement(NamedTuple):
    """One measurement: its name (session, kind, file stem, schema), what runs it, where its document goes,
    the model that reads it and what it is in the pages' words."""

    name: str
    args: tuple[str, ...]  # what its session runs, after ``python -m`` (``()``: no session, its writer is elsewhere)
    doc: str = ""  # the session's help line (``nox -l``)
    folder: str = ""  # under results/<device>/ (e.g. ``conformance``)
    gpus: int = 1  # runs on several GPUs of one host go to results/<device>x<gpus>/
    per_device: bool = True
    timestamped: bool = True  # False: the document must re-render identically (no time in it)
    version: int = 1
    groups: tuple[str, ...] = ()  # pyproject.toml dependency groups its session adds
    env: tuple[tuple[str, str], ...] = ()  # variables its session sets
    note: str = ""
    gpu: bool = True  # its session needs a CUDA GPU (a ``gpu``-tagged session); else it runs in the patched venv
    upstream_tests: bool = False  # its session also runs the series' tests in upstream's layout (again, JIT disabled)
    model: str = ""  # the class of suite.models that reads its document
    words: str = ""  # what a run of it is, in the pages' words
    needs: str = ""  # the arguments its session refuses to run without (their usage; the first is checked)
    entry: str = ""  # the module ``python -m bench NAME`` runs (default: bench.NAME)

    @property
    def schema(self) -> str:
        return f"{SCHEMA_PREFIX}{self.name.replace('_', '-')}/{self.version}"

    @property
    def file(self) -> str:
        """Its file under results/<device>/ (results/ when not per device)."""
        return f"{self.folder}/{self.name}.json" if self.folder else f"{self.name}.json"

    @property
    def session(self) -> str | None:
        return self.name if self.args else None

    @property
    def command(self) -> Command:
        return Command(self.session, self.args, note=self.note)

    @property
    def line(self) -> str:
        return self.command.line

    @property
    def nox(self) -> str | None:
        return self.command.nox


def _bench(name: str, *more: str) -> tuple[str, ...]:
    """``python -m bench NAME ...``: a measurement that is a module of bench/."""
    return ("bench", name, *more)


_TABLE = (
    Measurement("gpu", ("pytest", "-rs", "conformance/gpu"), folder="conformance", model="Gpu", words="the GPU tier",
                doc="GPU tier only: conformance/gpu + the series' upstream tests (again with FREETOKEN_DISABLE_JIT=1), summary into "
                    "results/<device>/conformance/gpu.json.",
                env=((CONFORMANCE_SUMMARY_ENV, "1"),), note=f"{CONFORMANCE_SUMMARY_ENV}=1", upstream_tests=True),
    Measurement("sanitize", ("conformance.gpu.run_sanitizer",), folder="conformance", model="Sanitize",
                words="the sanitizers",
                doc="GPU: compute-sanitizer memcheck, racecheck and synccheck on a small eager and graph case."),
    #: pytest-benchmark times every kernel with the device clock; --bench-store saves its JSON as the store
    #: (results/<device>/bench.json, bench/conftest.py).
    Measurement("bench", ("pytest", "-rs", "bench/test_bench_gather.py", "--benchmark-timer=gpukit.timing.device_clock",
                          "--bench-store"), version=2, model="BenchRun",
                words="the project benchmark (per-layer gather, decode step)",
                doc="GPU: pytest-benchmark over upstream, A/A, tma (+ copy engine), device clock, paired verdicts "
                    "-> results/<device>/bench.json."),
    Measurement("sweep", _bench("sweep"), groups=("sweep",), note="--quick: ~1 min", model="Sweep",
                words="the ceiling sweep",
                doc="GPU: host->device ceiling sweep (copy engine, LDG grids, TMA rings) -> results/<device>/sweep.json + .png."),
    Measurement("series_bench", _bench("series_bench"), note="the series' benchmark", model="SeriesBench",
                words="the series' benchmark",
                doc="GPU: the series' benchmarks/bench_decode_gather.py (per-layer copy, A/A, verdicts) -> results/<device>/."),
    Measurement("step_pdl", _bench("step_pdl"), note="decode-step breakdown and PDL A/B", model="StepPdl",
                words="the decode-step breakdown",
                doc="GPU: decode-step breakdown and per-layer PDL A/B (upstream, tma, tma+PDL, upstream+PDL) "
                    "-> results/<device>/step_pdl.json."),
    Measurement("contention", _bench("contention"), gpus=2, note="needs two GPUs", model="Contention",
                words="the two-GPU run",
                doc="GPU x2: both GPUs gathering at once against each one's solo rate -> results/<device>x2/contention.json."),
    #: The end-to-end A/B through FreeToken's engine; ``--model PATH`` comes from the caller.
    Measurement("e2e", _bench("e2e", "run"), note="needs --model PATH", model="E2E", words="end to end",
                needs="--model CHECKPOINT_DIR [--slots K | --miss-rate R] [--repeats N] [--fresh-processes]",
                entry="bench.e2e.__main__",
                doc="GPU: end-to-end A/B through FreeToken's engine, upstream vs tma and the A/A control in alternating "
                    "rounds in one process (--fresh-processes: a process per run): nox -s e2e -- --model PATH."),
    Measurement("auto_stability", _bench("auto_stability"), note="what auto ran in N fresh processes",
                model="AutoStability", words="auto's stability runs",
                doc=f"GPU: ft bench bw, then what {SWITCH_ENV}=auto ran in fresh processes and that building the "
                    "cache timed nothing -> results/<device>/auto_stability.json."),
    Measurement("sass", ("conformance.sass", "--arch", "80,90,100,120", "--save", "--check"), per_device=False,
                timestamped=False, version=2, gpu=False,
                doc="Compile-only SASS gate of the patched kernel for sm_80..sm_120 -> results/sass.json (nvcc, no GPU)."),
)  # fmt: skip

#: every measurement by its name
MEASUREMENTS: dict[str, Measurement] = {m.name: m for m in _TABLE}

#: The GPU sessions, in the order of a full run on a GPU machine.
GPU_RUN = tuple(MEASUREMENTS[n] for n in ("gpu", "sanitize", "bench", "sweep", "series_bench", "step_pdl", "contention"))

REPORT = Command("report", ("report",))
COMPARE = Command("compare", ("report.compare",), note="upstream, A/A and tma per (regime, layers, n), with the paired verdict")
#: pytest-benchmark's own table of a saved run (DEVICE: a results/ directory such as h200), one group per case.
PYTEST_BENCHMARK_COMPARE = Command(None, ("pytest-benchmark", "compare", f"results/DEVICE/{MEASUREMENTS['bench'].file}",
                                          "--group-by=param:regime,param:layers,param:n"), module=False)  # fmt: skip
#: The benchmark the series adds to upstream's tree: one command to measure another host.
SERIES_BENCH = Command(None, ("benchmarks/bench_decode_gather.py", "--model", "all", "--markdown"), module=False)
#: The offline checkpoint the end-to-end A/B runs on (``DIR`` from the caller; weights drawn on the GPU).
E2E_CHECKPOINT = Command(None, _bench("e2e", "make-checkpoint"), note="DIR [--layers N]")


def series_bench_line() -> str:
    return "python " + shlex.join(SERIES_BENCH.args)
