"""nox sessions for the decode-gather patch series against FreeToken (README.md says how to use them)."""

# Developer notes (not in the docstring, which ``nox -l`` prints).  ``nox -s apply build`` is the
# main job, ``nox -s test`` the default.  build, test, quick and sass share one venv on purpose, .nox/patched/
# (CPU torch is installed once): nox makes it for the ``patched`` session they require, which installs
# into it; they run in it (``reuse_venv = "yes"``; ``nox -R`` also skips the pip runs).  The GPU sessions
# keep their own venvs, made only where nvidia-smi finds a GPU.  Settings:
# FT_OVERLAY_WORKDIR (absolute; default .work/), FT_OVERLAY_WHEELHOUSE (offline wheels: pip's own
# PIP_NO_INDEX/PIP_FIND_LINKS are set from it), FT_OVERLAY_SYSTEM_SITE=1 (reuse the torch, triton,
# ... of the Python running nox; ``nox --no-venv`` runs in it), FT_OVERLAY_VERBOSE=1 (pip's output),
# TVM_FFI_CUDA_ARCH_LIST (kernel architectures for ``build``), FT_OVERLAY_KERNEL_SET=full (``build`` also compiles
# upstream's fast_index_copy_multi widths: the cache the GPU sessions build for themselves), FT_OVERLAY_REQUIRE_GPU=1
# (a GPU session without its GPUs fails instead of skipping).  pytest's testpaths and
# addopts are in pyproject.toml.  A new CPU session: ``@nox.session(python=False, requires=_PATCHED_VENV)``, then
# ``session.run(_in_patched(session), "-m", ...)`` (the shared venv's Python).

from __future__ import annotations

import logging
import os
import shlex
import shutil
import signal
import site
import subprocess
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
# The one place this checkout goes on sys.path by hand: the ``nox`` script (unlike ``python3 -m nox``) imports this
# file without it, and the noxfile needs the overlay's stdlib-only modules before any session exists.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from freetoken_overlay import requirements as req  # noqa: E402
from freetoken_overlay.kernels import KERNEL_SET_ENV, kernel_cache_for  # noqa: E402
from freetoken_overlay.pin import get_pin  # noqa: E402
from freetoken_overlay.series import series_hash, work_repo  # noqa: E402
from freetoken_overlay.util import NOX_COMMAND_ENV, NOX_ENV, NOX_RUN_ENV, REQUIRE_GPU_ENV, SYSTEM_SITE_ENV  # noqa: E402
from freetoken_overlay.util import WHEELHOUSE_ENV, OverlayError, Workdir  # noqa: E402
from freetoken_overlay.util import env_flag, wheelhouse_dir  # noqa: E402
from freetoken_overlay.wheel import local_version  # noqa: E402
from suite import commands  # noqa: E402

nox.options.sessions = ["test"]  # GPU sessions are tagged: nox -t gpu
nox.options.reuse_venv = "yes"
os.environ[NOX_ENV] = "1"  # the steps' advice names nox sessions, as nox was started:
os.environ[NOX_COMMAND_ENV] = "python3 -m nox" if Path(sys.argv[0]).name == "__main__.py" else "nox"
os.environ[NOX_RUN_ENV] = shlex.join([os.environ[NOX_COMMAND_ENV], *sys.argv[1:]])  # what a refusal names
# SIGTERM (timeout, a CI runner) ends nox as Ctrl-C does, through its KeyboardInterrupt: the step it runs gets the time
# to clean up (_step), rather than nox exiting at once while the step is still removing what it made.
signal.signal(signal.SIGTERM, signal.default_int_handler)
# nox looks for uv on every run and says so at info level; this project installs with pip.
logging.getLogger("nox").addFilter(lambda record: record.getMessage() != "uv binary not found.")

PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
KERNEL_CACHE_ENV = "FREETOKEN_KERNEL_CACHE_DIR"
DISABLE_JIT_ENV = "FREETOKEN_DISABLE_JIT"


def _group(*names: str) -> tuple[str, ...]:
    """PEP 735 dependency groups of pyproject.toml."""
    return nox.project.dependency_groups(PYPROJECT, *names)


def _setting(session: nox.Session, read):
    try:
        return read()
    except OverlayError as exc:
        session.error(str(exc))


def _pip_env(session: nox.Session) -> Path | None:
    """Point pip at the offline wheelhouse through its own variables (PIP_NO_INDEX, PIP_FIND_LINKS)."""
    wheelhouse = _setting(session, wheelhouse_dir)
    if wheelhouse is not None:
        session.env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse), PIP_DISABLE_PIP_VERSION_CHECK="1")
    return wheelhouse


def _expose_outer_site(session: nox.Session) -> None:
    """Make the venv see the site-packages of the Python running nox, after its own: a ``.pth`` file, since the GPU
    machine's python3 is itself a venv, whose packages ``--system-site-packages`` (the base's) would not include."""
    outer = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
    purelib = session.run("python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True)
    (Path(purelib.strip()) / "_ft_overlay_outer_site.pth").write_text("".join(f"{p}\n" for p in outer))


def _install_deps(session: nox.Session, *extra: str) -> None:
    """The import closure of the patched paths (+ ``extra``) and NO_DEPS; CPU torch unless the outer one is reused."""
    wheelhouse = _pip_env(session)
    no_venv = session.venv_backend == "none"
    if no_venv or _setting(session, lambda: env_flag(SYSTEM_SITE_ENV)):
        if not no_venv:
            _expose_outer_site(session)
        calls = [[*req.IMPORT_CLOSURE, *extra], ["--no-deps", *req.NO_DEPS]]  # torch unnamed: pip must not fetch one
    else:
        if wheelhouse is not None and not any(wheelhouse.glob("torch-*.whl")):
            session.error(f"{WHEELHOUSE_ENV}={wheelhouse} has no torch wheel; set {SYSTEM_SITE_ENV}=1 "
                          "to reuse the torch of the Python running nox")  # fmt: skip
        calls = [[req.TORCH_CPU, *req.IMPORT_CLOSURE, *extra, *req.NO_DEPS]]  # one pip run: torch is named
    for args in calls:
        if no_venv:  # nox refuses session.install outside a venv: pip into the Python running nox
            session.run_install(sys.executable, "-m", "pip", "install", "-q", *args, external=True)
        else:
            session.install(*args)


def _python(session: nox.Session) -> str:
    return sys.executable if session.venv_backend == "none" else "python"  # --no-venv: the Python running nox


#: The shared venv's interpreter and bin directory, recorded by the ``patched`` session for the sessions that
#: require it (nox runs a session's requirements first, in the same process).
_PATCHED: dict[str, str] = {}
#: What build, test, quick and sass require.  ``nox -l`` marks a requirement of a selected session as selected itself, so
#: the listing a user reads (not ``--json``, for tools) leaves it out: ``patched`` is only ever run that way.
_LISTING = bool({"-l", "--list", "--list-sessions"} & set(sys.argv[1:])) and "--json" not in sys.argv[1:]
_PATCHED_VENV = [] if _LISTING else ["patched"]


def _use_kernel_cache(session: nox.Session, python: str) -> None:
    """Point $FREETOKEN_KERNEL_CACHE_DIR at the kernel cache ``nox -s build`` made, once it is built for the installed
    series: one built for another series is rebuilt first, with ``python`` (freetoken_overlay.kernels.kernel_cache_for;
    a value already set is kept)."""
    if os.environ.get(KERNEL_CACHE_ENV):
        session.log(f"{KERNEL_CACHE_ENV}={os.environ[KERNEL_CACHE_ENV]} (as set)")
        return
    installed = local_version(get_pin(), series_hash())
    cache = _setting(session, lambda: kernel_cache_for(
        _setting(session, Workdir.from_env).kernel_cache, installed, log=session.log,
        rebuild=lambda settings: _step(session, python, "build-kernels", env=settings)))  # fmt: skip
    if cache is not None:
        session.env[KERNEL_CACHE_ENV] = str(cache)


def _step(session: nox.Session, python: str, command: str, *args: str, env: dict[str, str] | None = None) -> None:
    """``python -m freetoken_overlay COMMAND ARGS``.  Interrupted (Ctrl-C, or SIGTERM to nox), nox gives the step up to
    a minute to remove what it made aside before nox itself exits (nox's own default: 0.5 s, then SIGKILL)."""
    session.run(python, "-m", "freetoken_overlay", command, *args, env=env, external=True,
                interrupt_timeout=0.3, terminate_timeout=60)  # fmt: skip


def _install_patched(session: nox.Session, *extra: str) -> None:
    """Dependencies + the patched wheel (applied and built first if missing or stale)."""
    _install_deps(session, *extra)
    _step(session, _python(session), "build-wheel", "--install")


def _upstream_tests(session: nox.Session, *, all_: bool = False) -> list[str]:
    """The series' upstream tests, if any (unless ``all_``, only where pyproject.toml's testpaths do not name them)."""
    tests = work_repo(_setting(session, Workdir.from_env)) / "tests"
    return [str(tests)] if tests.is_dir() and (all_ or tests != ROOT / ".work" / "upstream" / "tests") else []


def _count_gpus() -> int:
    """The CUDA GPUs ``nvidia-smi -L`` lists (0 without nvidia-smi)."""
    smi = shutil.which("nvidia-smi")
    out = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False).stdout if smi else ""
    return sum(line.startswith("GPU ") for line in out.splitlines())


#: Counted once, as the noxfile loads: a GPU session gets a venv only where it has its GPUs, else it skips at once.
GPUS = _count_gpus()


def _require_gpu(session: nox.Session, gpus: int = 1) -> None:
    """The one behaviour of every GPU session on a machine without its GPUs: say so and skip (fail, with
    FT_OVERLAY_REQUIRE_GPU=1: a script then tells a skipped session from a passed one by the exit status)."""
    if GPUS < gpus:
        needs = "a CUDA GPU" if gpus == 1 else f"{gpus} CUDA GPUs"
        why = f"nox -s {session.name} needs {needs} (nvidia-smi finds {GPUS or 'none'} here)"
        if _setting(session, lambda: env_flag(REQUIRE_GPU_ENV)):
            session.error(f"{why}; {REQUIRE_GPU_ENV}=1 makes that a failure")
        session.skip(why)


def _overlay(session: nox.Session, command: str) -> None:
    """``python -m freetoken_overlay COMMAND posargs...`` in nox's own Python (stdlib only)."""
    _step(session, sys.executable, command, *session.posargs)


@nox.session(python=False)
def apply(session: nox.Session) -> None:
    """Apply patches/ as commits on branch decode-gather of .work/upstream (made once, never recreated)."""
    _overlay(session, "apply")


@nox.session(python=False)
def export(session: nox.Session) -> None:
    """Write patches/ from upstream-<version>..decode-gather in .work/upstream."""
    _overlay(session, "export")


@nox.session(default=False)
def patched(session: nox.Session) -> None:
    """The venv build, test, quick and sass share (.nox/patched/): CPU torch, the import closure, the patched wheel."""
    _install_patched(session, *_group("test", "kernel-build", *(() if GPUS else ("parallel",))))
    if session.venv_backend == "none":  # --no-venv: the Python running nox
        _PATCHED.update(python=sys.executable)
    else:
        _PATCHED.update(python=str(Path(session.bin) / "python"), bin=session.bin)


def _in_patched(session: nox.Session, *, kernel_cache: bool = True) -> str:
    """The shared venv's Python, its bin/ first on PATH (ninja, pytest) and, with ``kernel_cache``, the kernel
    cache built for the installed series, where there is one."""
    if "python" not in _PATCHED:
        session.error(f"nox -s {session.name} runs in the venv of the patched session it requires; "
                      "run it without --no-dependencies")  # fmt: skip
    if "bin" in _PATCHED:
        session.env.update(PATH=os.pathsep.join([_PATCHED["bin"], os.environ.get("PATH", "")]),
                           VIRTUAL_ENV=str(Path(_PATCHED["bin"]).parent))  # fmt: skip
    if kernel_cache:
        _use_kernel_cache(session, _PATCHED["python"])
    return _PATCHED["python"]


@nox.session(python=False, requires=_PATCHED_VENV)
def build(session: nox.Session) -> None:
    """Build and install the patched wheel (.work/dist/) and the series' AOT kernel cache."""
    python = _in_patched(session, kernel_cache=False)  # it is building that cache
    _step(session, python, "build-kernels", *session.posargs)


#: pytest options that choose how many processes run the tests, or need one (and ``-p no:xdist``): no ``-n auto`` then.
_ONE_PROCESS = ("-n", "--numprocesses", "--dist", "--pdb", "--trace")


#: A RAM disk for the tests' temporary files (TMPDIR, where unset), if it has this much room: they make and delete
#: some 90,000 files (git repositories, wheels), which on the 2-core CPU workplace's disk cost more than the tests.
_RAM_DISK, _RAM_DISK_ROOM = Path("/dev/shm"), 4 << 30


def _test_env(session: nox.Session) -> None:
    """Where the tests' bytecode and temporary files go: nothing about what they run."""
    if os.environ.get("PYTHONDONTWRITEBYTECODE"):
        # as set, every process would compile the checkout's modules again and pytest rewrite its plugins and every
        # test module again: their bytecode goes to <work dir>/pycache/ instead, still none beside the sources
        pycache = _setting(session, Workdir.from_env).root / "pycache"
        session.env.update(PYTHONDONTWRITEBYTECODE="", PYTHONPYCACHEPREFIX=str(pycache))
    if "TMPDIR" not in os.environ and _RAM_DISK.is_dir() and os.access(_RAM_DISK, os.W_OK):
        disk = os.statvfs(_RAM_DISK)  # with room, and tests run the scripts they write there
        if disk.f_bavail * disk.f_frsize >= _RAM_DISK_ROOM and not disk.f_flag & os.ST_NOEXEC:
            session.env["TMPDIR"] = str(_RAM_DISK)


def _pytest(session: nox.Session, *args: str) -> None:
    """pytest in the shared venv: ``args``, then ``-- ARGS`` (paths among them replace the default ones), spread over
    the CPU cores (pytest-xdist, ``-n auto``) on a machine without a GPU unless ARGS choose otherwise."""
    python = _in_patched(session)
    spread = not GPUS and not any(a.startswith(_ONE_PROCESS) or a.endswith("no:xdist") for a in session.posargs)
    paths = [] if session.posargs else _upstream_tests(session)
    _test_env(session)
    session.run(python, "-m", "pytest", *(["-n", "auto", "--dist", "loadgroup"] if spread else []), *args,
                *session.posargs, *paths, external=True)  # fmt: skip


@nox.session(python=False, requires=_PATCHED_VENV)
def test(session: nox.Session) -> None:
    """Run tests/, conformance/ and the series' upstream tests against the patched wheel (-- PATH... narrows it)."""
    _pytest(session)


@nox.session(python=False, requires=_PATCHED_VENV, default=False)
def quick(session: nox.Session) -> None:
    """The tests that run in-process only: -m 'not integration and not slow' (no git, nox, nvcc or pytest runs)."""
    _pytest(session, "-m", "not integration and not slow")


def _run_patched(session: nox.Session, cmd: commands.Measurement) -> None:
    """``cmd`` on a GPU with the patched wheel and the full kernel cache (+ the series' upstream tests, run a
    second time with FREETOKEN_DISABLE_JIT=1: every kernel from the cache; files go where suite.results says)."""
    _install_patched(session, *_group("test", "gpu", "kernel-build", *cmd.groups))
    # the series' kernels + upstream's fast_index_copy_multi widths, built once and kept (kernels.kernel_set)
    _step(session, _python(session), "build-kernels", env={KERNEL_SET_ENV: "full"})
    _use_kernel_cache(session, _python(session))
    paths = _upstream_tests(session, all_=True) if cmd.upstream_tests else []  # after the install, which may apply
    session.run(_python(session), "-m", *cmd.args, *paths, *session.posargs, env=dict(cmd.env), external=True)
    if paths:
        session.log("the series' upstream tests again, with FREETOKEN_DISABLE_JIT=1")
        session.run(_python(session), "-m", *commands.SERIES_NO_JIT.args, *paths, env={DISABLE_JIT_ENV: "1"},
                    external=True)  # fmt: skip


def _needs(session: nox.Session, cmd: commands.Measurement) -> None:
    """Refuse to run without the argument the measurement needs (``Measurement.needs``: its usage)."""
    first = cmd.needs.split()[0] if cmd.needs else None
    if first and not any(a == first or a.startswith(first + "=") for a in session.posargs):
        session.error(f"usage: nox -s {cmd.name} -- {cmd.needs}")


def _gpu_session(cmd: commands.Measurement) -> None:
    """The session ``nox -s NAME`` of a GPU measurement (suite.commands.MEASUREMENTS), tagged gpu."""

    def run(session: nox.Session) -> None:
        _require_gpu(session, cmd.gpus)  # first: without its GPUs every GPU session skips alike (e2e before its usage)
        _needs(session, cmd)
        _run_patched(session, cmd)

    run.__doc__ = cmd.doc
    # no venv where the GPUs are missing: the session only says so and skips
    nox.session(run, name=cmd.name, tags=["gpu"], default=False, python=None if GPUS >= cmd.gpus else False)


def _cpu_session(cmd: commands.Measurement) -> None:
    """The session ``nox -s NAME`` of a measurement that needs no GPU: its command in the patched venv."""

    def run(session: nox.Session) -> None:
        session.run(_in_patched(session), "-m", *cmd.args, *session.posargs, external=True)

    run.__doc__ = cmd.doc
    nox.session(run, name=cmd.name, python=False, requires=["patched"])


for _m in commands.MEASUREMENTS.values():
    if _m.session:
        (_gpu_session if _m.gpu else _cpu_session)(_m)


@nox.session
def report(session: nox.Session) -> None:
    """Render results/README.md, REPORT.md, PR-1.md and PR-2.md from the committed JSON with the templates (no GPU)."""
    session.install(*_group("report"))
    session.run("python", "-m", *commands.REPORT.args, *session.posargs)


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
