"""nox sessions for the decode-gather patch series against FreeToken (README.md says how to use them)."""

# Developer notes (not in the docstring, which ``nox -l`` prints).
#
# The main job is ``nox -s apply build``; the tests are ``nox -s test`` (the
# default session).  The sessions run the steps of ``python -m freetoken_overlay``.  Settings, from
# the environment:
#
# * FT_OVERLAY_WORKDIR       work directory, an absolute path (default ``.work/``)
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
# The one place this checkout goes on sys.path by hand: nox (the ``nox`` script, unlike
# ``python3 -m nox``) imports this file without the checkout on sys.path, and the noxfile needs
# the overlay's own stdlib-only modules (requirements, paths, commands) before any session exists.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from freetoken_overlay import requirements as req  # noqa: E402
from freetoken_overlay.pin import get_pin  # noqa: E402
from freetoken_overlay.series import series_hash, work_repo  # noqa: E402
from freetoken_overlay.util import (  # noqa: E402
    NOX_COMMAND_ENV,
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
from freetoken_overlay.wheel import local_version  # noqa: E402
from suite import commands  # noqa: E402

nox.options.sessions = ["test"]  # GPU sessions are tagged: nox -t gpu
nox.options.reuse_venv = "yes"
nox.options.default_venv_backend = "none"  # the sessions share SHARED_VENV instead (see _venv)
os.environ[NOX_ENV] = "1"  # the steps' advice names nox sessions, as nox was started:
os.environ[NOX_COMMAND_ENV] = "python3 -m nox" if Path(sys.argv[0]).name == "__main__.py" else "nox"
def _group(name: str) -> list[str]:
    """A PEP 735 dependency group of pyproject.toml."""
    return list(req.dependency_group(name))


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


def _workdir(session: nox.Session) -> Workdir:
    try:
        return Workdir.from_env()
    except OverlayError as exc:
        session.error(str(exc))


KERNEL_CACHE_ENV = "FREETOKEN_KERNEL_CACHE_DIR"


def _use_kernel_cache(session: nox.Session) -> None:
    """Point $FREETOKEN_KERNEL_CACHE_DIR at the kernel cache ``nox -s build`` made for the
    installed series (a value already set is kept; a cache built for another series is not used)."""
    if os.environ.get(KERNEL_CACHE_ENV):
        session.log(f"{KERNEL_CACHE_ENV}={os.environ[KERNEL_CACHE_ENV]} (as set)")
        return
    cache = _workdir(session).kernel_cache
    try:
        built_for = json.loads((cache / "MANIFEST.json").read_text()).get("freetoken")
    except (OSError, ValueError):
        session.log(f"no kernel cache at {cache} (nox -s build makes it); tests that need one skip")
        return
    installed = local_version(get_pin(), series_hash())
    if built_for != installed:
        session.log(f"the kernel cache at {cache} is for freetoken {built_for}, not {installed}: not using it "
                    "(nox -s build rebuilds it)")  # fmt: skip
        return
    session.env[KERNEL_CACHE_ENV] = str(cache)
    session.log(f"{KERNEL_CACHE_ENV}={cache} (built for {installed})")


def _install_patched(session: nox.Session, *extra: str, kernel_cache: bool = True) -> None:
    """Dependencies + the patched wheel (applied and built first if missing or stale); with
    ``kernel_cache``, the kernel cache built for it, where there is one."""
    _install_deps(session, *extra)
    session.run(_python(session), "-m", "freetoken_overlay", "build-wheel", "--install")
    if kernel_cache:
        _use_kernel_cache(session)


#: pytest options that take the next argument as their value (so it is not read as a test path).
_PYTEST_VALUE_OPTIONS = frozenset({
    "-k", "-m", "-p", "-c", "-o", "-W", "-r", "--deselect", "--ignore", "--ignore-glob", "--rootdir",
    "--basetemp", "--confcutdir", "--junitxml", "--junit-xml", "--tb", "--maxfail", "--durations",
    "--log-level", "--log-file", "--log-cli-level", "--override-ini", "--import-mode", "--capture",
})  # fmt: skip


def _split_test_paths(args: list[str]) -> tuple[list[str], list[str]]:
    """(test paths, other pytest arguments): a test path is neither an option nor an option's
    value, and is an existing path or one with ``/`` or ``::`` or ending ``.py``."""
    paths, rest, previous = [], [], ""
    for arg in args:
        path_like = "/" in arg or "::" in arg or arg.endswith(".py") or (ROOT / arg).exists()
        is_path = not arg.startswith("-") and previous not in _PYTEST_VALUE_OPTIONS and path_like
        (paths if is_path else rest).append(arg)
        previous = arg
    return paths, rest


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
    _install_patched(session, *_group("kernel-build"), kernel_cache=False)  # it is building that cache
    session.run(_python(session), "-m", "freetoken_overlay", "build-kernels", *_posargs(session))


@nox.session
def test(session: nox.Session) -> None:
    """Run tests/, conformance/ and the series' upstream tests against the patched wheel (-- PATH... narrows it)."""
    _install_patched(session, *_group("test"))
    paths, args = _split_test_paths(_posargs(session))  # given paths replace the default ones, as in pytest
    if not paths:
        paths = [d for d in ("tests", "conformance") if (ROOT / d).is_dir()]
        paths += sorted(str(p) for p in (work_repo(_workdir(session)) / "tests").glob("**/test_*.py"))
    session.run(_python(session), "-m", "pytest", "-rs", *paths, *args)


def _run_patched(session: nox.Session, cmd: commands.Command, *extra_requirements: str) -> None:
    """``cmd`` in the shared environment with the patched wheel (files go where suite.results says)."""
    _install_patched(session, *_group("test"), *extra_requirements)
    session.run(_python(session), *(["-m"] if cmd.module else []), *cmd.args, *_posargs(session))


@nox.session(tags=["gpu"], default=False)
def gpu(session: nox.Session) -> None:
    """GPU tier only: conformance/gpu + the series' upstream tests, summary into results/<device>/conformance/."""
    _install_patched(session, *_group("test"))
    session.env[commands.CONFORMANCE_SUMMARY_ENV] = "1"
    upstream_tests = sorted(str(p) for p in (work_repo(_workdir(session)) / "tests").glob("**/test_*.py"))
    session.run(_python(session), "-m", *commands.GPU.args, *upstream_tests, *_posargs(session))


@nox.session(tags=["gpu"], default=False)
def sanitize(session: nox.Session) -> None:
    """GPU: compute-sanitizer memcheck, racecheck and synccheck on a small eager and graph case."""
    _run_patched(session, commands.SANITIZE)


@nox.session(tags=["gpu"], default=False)
def bench(session: nox.Session) -> None:
    """GPU: pytest-benchmark over upstream, A/A, tma (+ copy engine), device clock, paired verdicts -> results/<device>/pytest-benchmark.json."""
    _run_patched(session, commands.BENCH)


@nox.session(tags=["gpu"], default=False)
def sweep(session: nox.Session) -> None:
    """GPU: host->device ceiling sweep (copy engine, LDG grids, TMA rings) -> results/<device>/ceiling.json + .png."""
    _run_patched(session, commands.SWEEP, *_group("sweep"))


@nox.session(tags=["gpu"], default=False)
def upstream_bench(session: nox.Session) -> None:
    """GPU: the series' benchmarks/bench_decode_gather.py (per-layer copy, A/A, verdicts) -> results/<device>/."""
    _run_patched(session, commands.UPSTREAM_BENCH_RUN)


@nox.session(tags=["gpu"], default=False)
def step(session: nox.Session) -> None:
    """GPU: decode-step breakdown and per-layer PDL A/B (upstream, tma, tma+PDL, upstream+PDL) -> results/<device>/step_pdl.json."""
    _run_patched(session, commands.STEP)


@nox.session(tags=["gpu"], default=False)
def contention(session: nox.Session) -> None:
    """GPU x2: both GPUs gathering at once against each one's solo rate -> results/<device>x2/contention.json."""
    _run_patched(session, commands.CONTENTION)


@nox.session(tags=["gpu"], default=False)
def e2e(session: nox.Session) -> None:
    """GPU: end-to-end A/B through FreeToken's engine, unset vs tma, fresh process per run: nox -s e2e -- --model PATH."""
    if not any(a == "--model" or a.startswith("--model=") for a in _posargs(session)):
        session.error("usage: nox -s e2e -- --model CHECKPOINT_DIR [--slots K ... | --miss-rate R ...] [--repeats N]")
    _run_patched(session, commands.E2E)


@nox.session(venv_backend="virtualenv")  # its own small venv: jinja2 only
def report(session: nox.Session) -> None:
    """Render results/README.md, REPORT.md and PR.md from the committed JSON with the templates (no GPU)."""
    session.install(*_group("report"))
    session.run("python", "-m", *commands.REPORT.args, *session.posargs)


@nox.session
def sass(session: nox.Session) -> None:
    """Compile-only SASS gate of the patched kernel for sm_80..sm_120 -> results/sass.json (nvcc, no GPU)."""
    _run_patched(session, commands.SASS)


@nox.session(python=False)  # stdlib only
def compare(session: nox.Session) -> None:
    """Upstream, A/A and tma per (regime, layers, n) from the saved pytest-benchmark JSON, with the paired verdict (no GPU)."""
    session.run(sys.executable, "-m", *commands.COMPARE.args, *session.posargs, external=True)


@nox.session(python=False)
def wheelhouse(session: nox.Session) -> None:
    """Download into DIR the wheels an offline GPU machine lacks: nox -s wheelhouse -- DIR."""
    if not session.posargs:
        session.error("usage: nox -s wheelhouse -- DIR [--python-version 3.12]")
    _overlay(session, "wheelhouse")
