"""nox sessions for the decode-gather patch series against FreeToken (README.md says how to use them)."""

# Developer notes (not in the docstring, which ``nox -l`` prints).
#
# The main job is ``nox -s apply build``; the tests are ``nox -s test`` (the
# default session).  The sessions run the steps of ``python -m freetoken_overlay``.  Settings, from
# the environment:
#
# * FT_OVERLAY_WORKDIR       work directory (default ``.work/``)
# * FT_OVERLAY_WHEELHOUSE    offline wheel directory: pip runs ``--no-index
#                            --find-links DIR`` and the freetoken wheel is read
#                            from it (still hash-checked); also ``-- --wheelhouse DIR``
# * FT_OVERLAY_SYSTEM_SITE=1 reuse the packages of the Python running nox (a GPU
#                            machine's torch, triton, ...) instead of installing
#                            torch; implied by ``nox --no-venv``
# * FT_OVERLAY_VERBOSE=1     show pip's own output (``nox -v`` shows it for the
#                            sessions' pip runs too)
# * TVM_FFI_CUDA_ARCH_LIST   kernel architectures for ``build`` (default "8.0 9.0 10.0 12.0")
#
# The installing sessions share one virtual environment, ``.nox/patched/``:
# ``build`` fills it, ``test`` and the GPU sessions reuse it, and a stamp in it
# lists what pip installed there, so pip runs only for what is missing (delete
# the directory to start afresh).  ``nox --no-venv`` installs into the Python
# running nox instead; ``nox -db virtualenv`` gives each session its own.
#
# To add a session: decorate a function with ``@nox.session``, call
# ``_install_patched(session, *extra_requirements)`` (the CPU dependencies and the
# patched wheel, honouring the settings above), then run commands with
# ``session.run(_python(session), ...)``; ``_posargs(session)`` gives the
# session's arguments without ``--wheelhouse``.

from __future__ import annotations

import itertools
import json
import os
import shutil
import site
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent

from freetoken_overlay import requirements as req
from freetoken_overlay.series import work_repo
from freetoken_overlay.util import (
    NOX_ENV,
    SYSTEM_SITE_ENV,
    VERBOSE_ENV,
    WHEELHOUSE_ENV,
    OverlayError,
    Workdir,
    env_flag,
    pip_source_args,
    wheelhouse_dir,
)
from gpukit import commands

nox.options.sessions = ["test"]  # GPU sessions are tagged: nox -t gpu
nox.options.reuse_venv = "yes"
nox.options.default_venv_backend = "none"  # the sessions share SHARED_VENV instead (see _venv)
os.environ[NOX_ENV] = "1"  # the steps' advice names nox sessions
PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")


def _group(name: str) -> list[str]:
    """A PEP 735 dependency group of pyproject.toml."""
    return list(nox.project.dependency_groups(PYPROJECT, name))


_OUTER_SITE_PTH = "_ft_overlay_outer_site.pth"
#: The virtual environment the installing sessions share, and its record of what pip installed.
SHARED_VENV = ROOT / ".nox" / "patched"
_STAMP = "ft-overlay-installed.json"


# ----------------------------------------------------------------------------- helpers


def _no_venv() -> bool:
    """Whether nox runs with ``--no-venv`` or ``-fb none``: install into the Python running nox.

    (The sessions' own backend is "none" either way, so nox's arguments tell.)
    """
    args = sys.argv[1:]
    forced = [b for a, b in itertools.pairwise(args) if a in ("-fb", "--force-venv-backend")]
    forced += [a.split("=", 1)[1] for a in args if a.startswith("--force-venv-backend=")]
    return "--no-venv" in args or "none" in forced


def _venv(session: nox.Session) -> Path | None:
    """The session's virtual environment: one nox made for it, else SHARED_VENV; None with ``--no-venv``."""
    if session.venv_backend != "none":
        return Path(session.virtualenv.location)
    return None if _no_venv() else SHARED_VENV


def _python(session: nox.Session) -> str:
    """The session's interpreter: its virtual environment's, or (``--no-venv``) the one running nox."""
    venv = _venv(session)
    return sys.executable if venv is None else str(venv / "bin" / "python")


def _verbose(session: nox.Session) -> bool:
    try:
        return env_flag(VERBOSE_ENV)
    except OverlayError as exc:
        session.error(str(exc))


def _activate_shared_venv(session: nox.Session, key: dict[str, object]) -> None:
    """Create SHARED_VENV if missing (afresh if made for another ``key``) and run the session in it."""
    stamp = _read_stamp()
    if stamp is not None and stamp["key"] != key:
        session.log(f"{SHARED_VENV.relative_to(ROOT)} was set up for {stamp['key']}; recreating it")
        shutil.rmtree(SHARED_VENV)
    if not (SHARED_VENV / "bin" / "python").is_file():
        session.log(f"creating the shared virtual environment {SHARED_VENV.relative_to(ROOT)}")
        session.run(sys.executable, "-m", "virtualenv", "-q", "-p", sys.executable, str(SHARED_VENV),
                    silent=not _verbose(session))  # fmt: skip
    session.env["VIRTUAL_ENV"] = str(SHARED_VENV)
    session.env["PATH"] = os.pathsep.join([str(SHARED_VENV / "bin"), os.environ.get("PATH", "")])


def _read_stamp(venv: Path = SHARED_VENV) -> dict | None:
    try:
        return json.loads((venv / _STAMP).read_text())
    except (OSError, ValueError):
        return None


def _reuse_outer_env(session: nox.Session) -> bool:
    """Whether the session reuses the packages of the Python running nox."""
    try:
        return _venv(session) is None or env_flag(SYSTEM_SITE_ENV)
    except OverlayError as exc:
        session.error(str(exc))


def _split_wheelhouse(session: nox.Session) -> tuple[Path | None, list[str]]:
    """``--wheelhouse DIR`` from the posargs (else $FT_OVERLAY_WHEELHOUSE), and the other posargs.

    A wheelhouse given on the command line is exported to the session's
    commands as $FT_OVERLAY_WHEELHOUSE.
    """
    args, explicit = list(session.posargs), None
    for index, arg in enumerate(args):
        if arg == "--wheelhouse" and index + 1 < len(args):
            explicit = args[index + 1]
            del args[index : index + 2]
            break
        if arg.startswith("--wheelhouse="):
            explicit = arg.split("=", 1)[1]
            del args[index]
            break
    try:
        wheelhouse = wheelhouse_dir(explicit)
    except OverlayError as exc:
        session.error(str(exc))
    if wheelhouse is not None:
        session.env[WHEELHOUSE_ENV] = str(wheelhouse)
    return wheelhouse, args


def _posargs(session: nox.Session) -> list[str]:
    return _split_wheelhouse(session)[1]


def _pip(session: nox.Session, *args: str) -> None:
    """``pip install args...``; pip's own output shows only with FT_OVERLAY_VERBOSE=1, ``nox -v`` or on failure."""
    session.run(_python(session), "-m", "pip", "install", "--disable-pip-version-check", *args,
                silent=not _verbose(session))  # fmt: skip


def _expose_outer_site(session: nox.Session) -> None:
    """Make the venv see the site-packages of the Python running nox, after its own.

    A ``.pth`` file rather than ``--system-site-packages``: the GPU machine's
    python3 is itself a venv, whose packages a nested venv's "system site"
    (the base interpreter's) would not include.
    """
    outer = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
    purelib = session.run(
        _python(session), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True
    ).strip()
    (Path(purelib) / _OUTER_SITE_PTH).write_text("".join(f"{p}\n" for p in outer))


def _install_deps(session: nox.Session, *extra: str) -> None:
    """The import closure of the patched paths (+ ``extra``), and torch unless reused.

    In a virtual environment, a stamp there records what was installed (with
    the Python, the package source and whether torch is reused): what it lists
    is not installed again.
    """
    wheelhouse, _ = _split_wheelhouse(session)
    source = pip_source_args(wheelhouse)
    reuse = _reuse_outer_env(session)
    requirements = [*req.IMPORT_CLOSURE, *extra]
    if not reuse:
        if wheelhouse is not None and not any(wheelhouse.glob("torch-*.whl")):
            session.error(
                f"{WHEELHOUSE_ENV}={wheelhouse} has no torch wheel; set {SYSTEM_SITE_ENV}=1 "
                "to reuse the torch of the Python running nox"
            )
        requirements.insert(0, req.TORCH_CPU)
    venv = _venv(session)
    key = {"python": sys.version.split()[0], "reuse_outer_site": reuse, "source": source}
    if venv == SHARED_VENV:
        _activate_shared_venv(session, key)
    if reuse and venv is not None:
        _expose_outer_site(session)
    stamp = _read_stamp(venv) if venv is not None else None
    done = set(stamp["installed"]) if stamp is not None and stamp["key"] == key else set()
    missing = [r for r in requirements if r not in done]
    no_deps = [r for r in req.NO_DEPS if f"--no-deps {r}" not in done]
    if not missing and not no_deps:
        session.log(f"dependencies already installed in {venv} (as its {_STAMP} records)")
        return
    what = ["CPU torch"] * (req.TORCH_CPU in missing)
    what += ["import closure"] * any(r in missing for r in req.IMPORT_CLOSURE) + [r for r in extra if r in missing]
    session.log(f"installing {' + '.join(what or ['import closure'])} ...")
    if missing:
        _pip(session, *source, *missing)
    if no_deps:
        _pip(session, *source, "--no-deps", *no_deps)
    if venv is not None:
        installed = sorted(done | set(missing) | {f"--no-deps {r}" for r in no_deps})
        (venv / _STAMP).write_text(json.dumps({"key": key, "installed": installed}, indent=1) + "\n")


def _install_patched(session: nox.Session, *extra: str) -> None:
    """Dependencies + the patched wheel (applied and built first if missing or stale)."""
    _install_deps(session, *extra)
    session.run(_python(session), "-m", "freetoken_overlay", "build-wheel", "--install")


def _overlay(session: nox.Session, command: str) -> None:
    """``python -m freetoken_overlay COMMAND posargs...`` in nox's own Python (stdlib only)."""
    session.run(sys.executable, "-m", "freetoken_overlay", command, *session.posargs, external=True)


# ----------------------------------------------------------------------------- sessions


@nox.session(python=False)
def apply(session: nox.Session) -> None:
    """Rebuild .work/upstream from the pinned wheel and git-am patches/ onto branch decode-gather."""
    _overlay(session, "apply")


@nox.session(python=False)
def export(session: nox.Session) -> None:
    """Regenerate patches/ from upstream-<version>..decode-gather in .work/upstream."""
    _overlay(session, "export")


@nox.session
def build(session: nox.Session) -> None:
    """Build and install the patched wheel (.work/dist/) and the series' AOT kernel cache."""
    _install_patched(session, *_group("kernel-build"))
    session.run(_python(session), "-m", "freetoken_overlay", "build-kernels", *_posargs(session))


@nox.session
def test(session: nox.Session) -> None:
    """Run tests/, conformance/ and the series' upstream tests against the patched wheel."""
    _install_patched(session, *_group("test"))
    upstream_tests = work_repo(Workdir.from_env()) / "tests"
    paths = [d for d in ("tests", "conformance") if (ROOT / d).is_dir()]
    paths += sorted(str(p) for p in upstream_tests.glob("**/test_*.py"))
    session.run(_python(session), "-m", "pytest", "-rs", *paths, *_posargs(session))


def _device_slug(session: nox.Session) -> str:
    """The device slug of this machine's GPU (``h200``), for paths the session itself must name."""
    out = session.run(
        _python(session), "-c", "from gpukit.machine import device_slug; import torch; "
        "print(device_slug(torch.cuda.get_device_name() if torch.cuda.is_available() else None))", silent=True,
    )  # fmt: skip
    return (out or "unknown").strip().splitlines()[-1]


def _results_dir(session: nox.Session) -> str:
    """results/<device>/ for a GPU session's files ($BENCH_RESULTS_DIR overrides)."""
    return session.env.get("BENCH_RESULTS_DIR") or str(ROOT / "results" / "{device}")


@nox.session(tags=["gpu"], default=False)
def gpu(session: nox.Session) -> None:
    """GPU tier only: conformance/gpu + the series' upstream tests, summary into results/<device>/conformance/."""
    _install_patched(session, *_group("test"))
    report_dir = session.env.get("CONFORMANCE_REPORT_DIR") or str(ROOT / "results" / "{device}" / "conformance")
    session.env["CONFORMANCE_REPORT_DIR"] = report_dir
    upstream_tests = sorted(str(p) for p in (work_repo(Workdir.from_env()) / "tests").glob("**/test_*.py"))
    session.run(_python(session), "-m", *commands.GPU.args, *upstream_tests, *_posargs(session))


@nox.session(tags=["gpu"], default=False)
def sanitize(session: nox.Session) -> None:
    """GPU: compute-sanitizer memcheck, racecheck and synccheck on a small eager and graph case."""
    _install_patched(session, *_group("test"))
    out = session.env.get("CONFORMANCE_REPORT_DIR") or str(ROOT / "results" / "{device}" / "conformance")
    args = [a.replace(commands.CONFORMANCE_DIR, out) for a in commands.SANITIZE.args]
    session.run(_python(session), "-m", *args, *_posargs(session))


@nox.session(tags=["gpu"], default=False)
def bench(session: nox.Session) -> None:
    """GPU: paired benchmarks (upstream, decode_gather, copy engine, A/A) -> results/<device>/bench.json."""
    _install_patched(session, *_group("test"))
    session.env.setdefault("BENCH_RESULTS_DIR", _results_dir(session))
    storage = str(ROOT / commands.BENCH_STORAGE).replace("{device}", _device_slug(session))
    args = [a.replace(commands.BENCH_STORAGE, storage) for a in commands.BENCH.args]
    session.run(_python(session), "-m", *args, *_posargs(session))


@nox.session(tags=["gpu"], default=False)
def sweep(session: nox.Session) -> None:
    """GPU: host->device ceiling sweep (copy engine, LDG grids, TMA rings) -> results/<device>/ceiling.json + .png."""
    _install_patched(session, *_group("test"), *_group("sweep"))
    session.run(_python(session), "-m", *commands.SWEEP.args, *_posargs(session))


def _run_with_device(session: nox.Session, cmd: commands.Command) -> None:
    """``cmd`` with ``{device}`` filled in, in the shared environment with the patched wheel."""
    _install_patched(session, *_group("test"))
    args = [a.replace("{device}", _device_slug(session)) for a in cmd.args]
    session.run(_python(session), *(["-m"] if cmd.module else []), *args, *_posargs(session))


@nox.session(tags=["gpu"], default=False)
def upstream_bench(session: nox.Session) -> None:
    """GPU: the series' benchmarks/bench_decode_gather.py (per-layer copy, A/A, verdicts) -> results/<device>/."""
    _run_with_device(session, commands.UPSTREAM_BENCH_RUN)


@nox.session(tags=["gpu"], default=False)
def step(session: nox.Session) -> None:
    """GPU: decode-step breakdown and PDL A/B (unset, tma, tma+PDL, upstream+PDL) -> results/<device>/step_pdl.json."""
    _run_with_device(session, commands.STEP)


@nox.session(tags=["gpu"], default=False)
def contention(session: nox.Session) -> None:
    """GPU x2: both GPUs gathering at once against each one's solo rate -> results/<device>x2/contention.json."""
    _run_with_device(session, commands.CONTENTION)


@nox.session(tags=["gpu"], default=False)
def e2e(session: nox.Session) -> None:
    """GPU: end-to-end A/B through FreeToken's engine, unset vs tma, fresh process per run: nox -s e2e -- --model PATH."""
    if not any(a == "--model" or a.startswith("--model=") for a in _posargs(session)):
        session.error("usage: nox -s e2e -- --model CHECKPOINT_DIR [--slots K ... | --miss-rate R ...] [--repeats N]")
    _run_with_device(session, commands.E2E)


@nox.session(venv_backend="virtualenv")  # its own small venv: jinja2 only
def report(session: nox.Session) -> None:
    """Render results/README.md, REPORT.md and PR.md from the committed JSON with the templates (no GPU)."""
    session.install(*_group("report"))
    session.run("python", "-m", *commands.REPORT.args, *session.posargs)


@nox.session
def sass(session: nox.Session) -> None:
    """Compile-only SASS gate of the patched kernel for sm_80..sm_120 -> results/sass.json (nvcc, no GPU)."""
    _install_patched(session, *_group("test"))
    session.run(_python(session), "-m", *commands.SASS.args, *_posargs(session))


@nox.session(venv_backend="virtualenv")  # its own small venv: pytest-benchmark only
def compare(session: nox.Session) -> None:
    """pytest-benchmark compare of the committed runs: the kernels side by side per miss count (no GPU)."""
    session.install(*_group("compare"))
    for storage in sorted((ROOT / "results").glob("*/pytest-benchmark")):
        device = storage.parent.name
        args = [a.replace("{device}", device) for a in commands.COMPARE.args]
        session.run(*args, *session.posargs)


@nox.session(python=False)
def wheelhouse(session: nox.Session) -> None:
    """Download into DIR the wheels an offline GPU machine lacks: nox -s wheelhouse -- DIR."""
    if not session.posargs:
        session.error("usage: nox -s wheelhouse -- DIR [--python-version 3.12]")
    _overlay(session, "wheelhouse")
