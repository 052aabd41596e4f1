"""nox sessions for the decode-gather patch series against FreeToken (README.md says how to use them)."""

# Developer notes (``nox -l`` prints the docstring).  build, test, quick and sass share .nox/patched/, the venv of the
# ``patched`` session they require.  Settings: freetoken_overlay.util; what every session shares: .sessions.  A new CPU
# session: ``@_session(python=False, requires=_PATCHED_VENV)``, ``session.run(_in_patched(session), "-m", ...)``.

from __future__ import annotations

import os
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).resolve().parent
# The one place this checkout goes on sys.path by hand: the ``nox`` script (unlike ``python3 -m nox``) imports this
# file without it, and the noxfile needs the overlay's stdlib-only modules before any session exists.
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from freetoken_overlay import sessions  # noqa: E402
from freetoken_overlay.kernel_cache import KERNEL_SET_ENV, kernel_cache_for  # noqa: E402
from freetoken_overlay.pin import get_pin  # noqa: E402
from freetoken_overlay.series import series_hash  # noqa: E402
from freetoken_overlay.util import REQUIRE_GPU_ENV, SYSTEM_SITE_ENV, OverlayError, Workdir  # noqa: E402
from freetoken_overlay.util import env_flag, wheelhouse_dir  # noqa: E402
from freetoken_overlay.wheel import local_version  # noqa: E402
from suite import commands  # noqa: E402

nox.options.sessions = ["test"]  # GPU sessions are tagged: nox -t gpu
nox.options.reuse_venv = "yes"
sessions.install()  # SIGINT, SIGTERM: nox stops, and so does every process its sessions started

PYPROJECT = nox.project.load_toml(ROOT / "pyproject.toml")
KERNEL_CACHE_ENV = "FREETOKEN_KERNEL_CACHE_DIR"


def _session(**kwargs):
    """``@nox.session(**kwargs)``, the function run as every session is (freetoken_overlay.sessions.around)."""
    return lambda func: nox.session(sessions.around(func), **kwargs)


def _group(*names: str) -> tuple[str, ...]:
    """PEP 735 dependency groups of pyproject.toml."""
    return nox.project.dependency_groups(PYPROJECT, *names)


def _setting(session: nox.Session, read):
    try:
        return read()
    except OverlayError as exc:
        session.error(str(exc))


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
    series: one built for another series is rebuilt first, with ``python``
    (freetoken_overlay.kernel_cache.kernel_cache_for; a value already set is kept)."""
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
    """``python -m freetoken_overlay COMMAND ARGS`` (interrupted, it gets a minute to remove what it made aside)."""
    session.run(python, "-m", "freetoken_overlay", command, *args, env=env, external=True)


def _install_patched(session: nox.Session, *extra: str) -> None:
    """Dependencies (freetoken_overlay.sessions.install_deps) + the patched wheel (applied and built first if missing
    or stale)."""
    sessions.install_deps(session, *extra, system_site=_setting(session, lambda: env_flag(SYSTEM_SITE_ENV)),
                          wheelhouse=_setting(session, wheelhouse_dir))  # fmt: skip
    _step(session, _python(session), "build-wheel", "--install")


def _venv_with_gpus(gpus: int) -> str:
    """A venv backend (registered with nox): nox's virtualenv where nvidia-smi finds ``gpus`` GPUs as the session
    starts, else none: a GPU session without its GPUs makes no venv, it only says so and skips."""
    name = f"virtualenv-with-{gpus}-gpus"
    nox.virtualenv.ALL_VENVS[name] = lambda envdir, **kwargs: (
        nox.virtualenv.ALL_VENVS["virtualenv"](envdir, **kwargs) if sessions.count_gpus() >= gpus
        else nox.virtualenv.PassthroughEnv())  # fmt: skip
    return name


@_session(python=False)
def apply(session: nox.Session) -> None:
    """Apply patches/ as commits on branch decode-gather of .work/upstream (made once, never recreated)."""
    _step(session, sys.executable, "apply", *session.posargs)  # nox's own Python: stdlib only


@_session(python=False)
def export(session: nox.Session) -> None:
    """Write patches/ from upstream-<version>..decode-gather in .work/upstream."""
    _step(session, sys.executable, "export", *session.posargs)


@_session(default=False)
def patched(session: nox.Session) -> None:
    """The venv build, test, quick and sass share (.nox/patched/): CPU torch, the import closure, the patched wheel."""
    _install_patched(session, *_group("test", "kernel-build", *(() if sessions.count_gpus() else ("parallel",))))
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


@_session(python=False, requires=_PATCHED_VENV)
def build(session: nox.Session) -> None:
    """Build and install the patched wheel (.work/dist/) and the series' AOT kernel cache."""
    python = _in_patched(session, kernel_cache=False)  # it is building that cache
    _step(session, python, "build-kernels", *session.posargs)


#: pytest options that choose how many processes run the tests, or need one (and ``-p no:xdist``): no ``-n auto`` then.
_ONE_PROCESS = ("-n", "--numprocesses", "--dist", "--pdb", "--trace")


def _pytest(session: nox.Session, *args: str) -> None:
    """pytest in the shared venv, in the tests' environment (freetoken_overlay.sessions.test_env): ``args``, then
    ``-- ARGS`` (paths among them replace the default ones), spread over the CPU cores (pytest-xdist, ``-n auto``) on a
    machine without a GPU unless ARGS choose otherwise."""
    python, args_ = _in_patched(session), session.posargs
    spread = not sessions.count_gpus() and not any(a.startswith(_ONE_PROCESS) or a.endswith("no:xdist") for a in args_)
    env, basetemp = sessions.test_env(_setting(session, Workdir.from_env), session.name)
    mine = [] if any(a.startswith("--basetemp") for a in args_) else [f"--basetemp={basetemp}"]
    session.run(python, "-m", "pytest", *(["-n", "auto", "--dist", "loadgroup"] if spread else []), *args, *mine,
                *args_, env=env, external=True)  # fmt: skip


@_session(python=False, requires=_PATCHED_VENV)
def test(session: nox.Session) -> None:
    """Run tests/, conformance/ and the series' upstream tests against the patched wheel (-- PATH... narrows it)."""
    _pytest(session)


@_session(python=False, requires=_PATCHED_VENV, default=False)
def quick(session: nox.Session) -> None:
    """The tests that run in-process only: -m 'not integration and not slow' (no git, nox, nvcc or pytest runs)."""
    _pytest(session, "-m", "not integration and not slow")


def _run_patched(session: nox.Session, cmd: commands.Measurement) -> None:
    """``cmd`` on a GPU with the patched wheel and the full kernel cache (+ the series' tests in upstream's layout,
    run a second time with FREETOKEN_DISABLE_JIT=1: every kernel from the cache; files go where suite.results says)."""
    _install_patched(session, *_group("test", "gpu", "kernel-build", *cmd.groups))
    # the series' kernels + upstream's fast_index_copy_multi widths, built once and kept (kernels.kernel_set)
    _step(session, _python(session), "build-kernels", env={KERNEL_SET_ENV: "full"})
    _use_kernel_cache(session, _python(session))
    session.run(_python(session), "-m", *cmd.args, *session.posargs, env=dict(cmd.env), external=True)
    for env in ({}, {"FREETOKEN_DISABLE_JIT": "1"}) if cmd.upstream_tests else ():
        _step(session, _python(session), "series-tests", "--", "-rs", env=env)


def _measurement(cmd: commands.Measurement) -> None:
    """The session ``nox -s NAME`` of a measurement (suite.commands.MEASUREMENTS): a GPU one tagged gpu, in its own
    venv; one that needs no GPU runs its command in the patched venv."""

    def run(session: nox.Session) -> None:
        if not cmd.gpu:
            return session.run(_in_patched(session), "-m", *cmd.args, *session.posargs, external=True)
        # first: without its GPUs every GPU session skips alike (e2e before its usage)
        sessions.require_gpus(session, cmd.gpus, _setting(session, lambda: env_flag(REQUIRE_GPU_ENV)))
        first = cmd.needs.split()[0] if cmd.needs else None  # refused without the argument it needs
        if first and not any(a == first or a.startswith(first + "=") for a in session.posargs):
            session.error(f"usage: nox -s {cmd.name} -- {cmd.needs}")
        _run_patched(session, cmd)

    run.__doc__ = cmd.doc
    where = dict(tags=["gpu"], default=False, venv_backend=_venv_with_gpus(cmd.gpus)) if cmd.gpu else \
        dict(python=False, requires=_PATCHED_VENV)  # fmt: skip
    _session(name=cmd.name, **where)(run)


for _m in commands.MEASUREMENTS.values():
    if _m.session:
        _measurement(_m)


@_session()
def report(session: nox.Session) -> None:
    """Render results/README.md, REPORT.md and one PR-<n>.md per line of patches/pull-requests.txt (no GPU)."""
    session.install(*_group("report"))
    session.run("python", "-m", *commands.REPORT.args, *session.posargs)


@_session(python=False)  # stdlib only
def compare(session: nox.Session) -> None:
    """Upstream, A/A and tma per (regime, layers, n) from the saved pytest-benchmark JSON, with the paired verdict (no GPU)."""
    session.run(sys.executable, "-m", *commands.COMPARE.args, *session.posargs, external=True)


@_session(python=False)
def wheelhouse(session: nox.Session) -> None:
    """Download into DIR the wheels an offline GPU machine lacks: nox -s wheelhouse -- DIR."""
    if not session.posargs:
        session.error("usage: nox -s wheelhouse -- DIR [--python-version 3.12]")
    _step(session, sys.executable, "wheelhouse", *session.posargs)
