"""What every session of noxfile.py shares, in nox's own process.  The noxfile calls :func:`install` as it loads (it
starts no process and leaves os.environ as it was) and runs each session's function through :func:`around`.

SIGINT (Ctrl-C), SIGTERM or SIGHUP at any moment stops nox: the processes its sessions started (from /proc; nox adopts
those whose parent died, e.g. pytest-xdist's workers) get the signal where the terminal did not send it, SIGTERM a
second later, SIGKILL a minute after that (a step's time to remove what it made aside, freetoken_overlay.cli); nox
names the signal and exits 128 + its number (130, 143, 129), running no later session.  For tests, $FT_OVERLAY_SIGNAL_AT
"start:NAME SIGNAL" or "end:NAME SIGNAL" makes nox send itself SIGNAL before session NAME's function or after it returned.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import logging
import os
import re
import shlex
import shutil
import signal
import site
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path

from . import requirements as req
from .util import NOX_COMMAND_ENV, NOX_ENV, NOX_RUN_ENV, REQUIRE_GPU_ENV, SYSTEM_SITE_ENV, WHEELHOUSE_ENV, Workdir

logger = logging.getLogger("nox")  # nox's own: its lines read "nox > ..."
SIGNAL_AT_ENV = "FT_OVERLAY_SIGNAL_AT"
_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
#: Seconds the sessions' processes get after SIGINT before SIGTERM, and after that before SIGKILL.
INTERRUPT_S, GRACE_S = 1.0, 60.0
_stopping: list[int] = []


def install() -> None:
    for signum in _SIGNALS:
        signal.signal(signum, _stop)
    with contextlib.suppress(AttributeError, OSError):  # Linux: a process whose parent dies becomes nox's child
        ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # (PR_SET_CHILD_SUBREAPER), so that a stop finds it
    # nox looks for uv on every run and says so at info level; this project installs with pip
    logger.addFilter(lambda record: record.getMessage() != "uv binary not found.")


def _stop(signum: int, _frame) -> None:
    if _stopping:  # a second signal: the stop is under way
        return
    _stopping.append(signum)
    try:  # whatever fails here, nox exits
        logger.error(f"got {signal.Signals(signum).name}: stopping; no later session runs (exit {128 + signum})")
        terminal = False
        with contextlib.suppress(OSError):  # Ctrl-C: the terminal sent it to every process of its foreground group
            terminal = signum == signal.SIGINT and os.tcgetpgrp(2) == os.getpgrp()
        if not terminal:
            _send(signum)
        _wait(INTERRUPT_S)
        _send(signal.SIGTERM)
        if left := _wait(0.5):
            logger.error(f"waiting up to {GRACE_S:.0f} s for {left} process(es) to end")
            if _wait(GRACE_S):
                _send(signal.SIGKILL)
                _wait(10.0)
        logging.shutdown()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(128 + signum)


def _ours() -> set[int]:
    """The live processes this one started, and theirs (from /proc)."""
    parents = {}
    for entry in os.scandir("/proc") if os.path.isdir("/proc") else ():
        try:
            state, ppid = Path(entry.path, "stat").read_text().rpartition(")")[2].split()[:2]
        except (OSError, ValueError):  # gone, or not a process
            continue
        if entry.name.isdigit() and state not in "ZX":
            parents[int(entry.name)] = int(ppid)
    ours = {os.getpid()}
    while new := {pid for pid, ppid in parents.items() if ppid in ours and pid not in ours}:
        ours |= new
    return ours - {os.getpid()}


def _send(signum: int) -> None:
    for pid in _ours():
        with contextlib.suppress(OSError):  # gone already
            os.kill(pid, signum)


def _wait(seconds: float) -> int:
    """Wait up to ``seconds`` for the processes :func:`_ours` finds to end; how many are left."""
    deadline = time.monotonic() + seconds
    while (left := len(_ours())) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _signal_at(session, point: str) -> None:
    raw = os.environ.get(SIGNAL_AT_ENV, "")
    at, _, name = raw.partition(" ")
    if raw and not (re.fullmatch(r"(start|end):\S+", at) and name in signal.Signals.__members__):
        session.error(f"{SIGNAL_AT_ENV}={raw!r}; allowed: 'start:SESSION SIGNAL' or 'end:SESSION SIGNAL'")
    if raw and at == point:
        os.kill(os.getpid(), signal.Signals[name])


def around(func):
    """A nox session's function, between the points of $FT_OVERLAY_SIGNAL_AT, with what the steps' advice reads: that
    nox runs them, how nox was started (``nox`` or ``python3 -m nox``), the command line (what a refusal names)."""

    @functools.wraps(func)
    def run(session) -> None:
        _signal_at(session, f"start:{session.name}")
        nox = "python3 -m nox" if Path(sys.argv[0]).name == "__main__.py" else "nox"
        session.env.update({NOX_ENV: "1", NOX_COMMAND_ENV: nox, NOX_RUN_ENV: shlex.join([nox, *sys.argv[1:]])})
        func(session)
        _signal_at(session, f"end:{session.name}")

    return run


#: The variables that choose what is under test (the series' switch and its knobs): the test sessions clear them.
CHOOSERS = re.compile(r"FREETOKEN_(DECODE_GATHER\w*|H2D_BLOCKS_PER_BANK|BENCHBW_PATH)")


def test_env(workdir: Workdir, name: str, environ: Mapping[str, str] = os.environ) -> tuple[dict, Path]:
    """Test session ``name``'s environment (nox's ``env=``: None removes a variable) and pytest's --basetemp: what
    chooses what is under test cleared (FREETOKEN_KERNEL_CACHE_DIR, FREETOKEN_DISABLE_JIT kept), temporary files and
    caches under ``<work dir>/session/NAME/`` (none in /tmp).  Says so in one line."""
    folder = workdir.root / "session" / name
    env: dict[str, str | None] = {k: None for k in sorted(environ) if CHOOSERS.fullmatch(k)}
    cleared = ", ".join(f"{k}={environ[k]!r}" for k in env) or "nothing"
    for key, sub in (("TMPDIR", "tmp"), ("XDG_CACHE_HOME", "cache")):
        (folder / sub).mkdir(parents=True, exist_ok=True)
        env[key] = str(folder / sub)
    if environ.get("PYTHONDONTWRITEBYTECODE"):
        # else every process compiles the checkout again and pytest rewrites every test module: <work dir>/pycache/
        env.update(PYTHONDONTWRITEBYTECODE="", PYTHONPYCACHEPREFIX=str(workdir.root / "pycache"))
    logger.info(f"the tests' environment: cleared {cleared} (what is under test); TMPDIR, XDG_CACHE_HOME and "
                f"pytest's --basetemp under {folder}")  # fmt: skip
    return env, folder / "pytest"


def install_deps(session, *extra: str, system_site: bool, wheelhouse: Path | None) -> None:
    """Install the import closure of the patched paths (+ ``extra``) and NO_DEPS (freetoken_overlay.requirements); CPU
    torch, unless ``system_site`` ($FT_OVERLAY_SYSTEM_SITE) or no venv reuses the torch of the Python running nox; from
    the offline ``wheelhouse``, where there is one (pip's own PIP_NO_INDEX, PIP_FIND_LINKS)."""
    if wheelhouse is not None:
        session.env.update(PIP_NO_INDEX="1", PIP_FIND_LINKS=str(wheelhouse), PIP_DISABLE_PIP_VERSION_CHECK="1")
    no_venv = session.venv_backend == "none"
    if no_venv or system_site:
        if not no_venv:  # a .pth file: the GPU machine's python3 is itself a venv, whose packages
            # --system-site-packages (the base's) would not include; the venv's own come first
            outer = [p for p in (*site.getsitepackages(), site.getusersitepackages()) if Path(p).is_dir()]
            lib = session.run("python", "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])", silent=True)
            (Path(lib.strip()) / "_ft_overlay_outer_site.pth").write_text("".join(f"{p}\n" for p in outer))
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


@functools.cache
def count_gpus() -> int:
    """The CUDA GPUs ``nvidia-smi -L`` lists (0 without nvidia-smi), asked when a session first needs it."""
    smi = shutil.which("nvidia-smi")
    out = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False).stdout if smi else ""
    return sum(line.startswith("GPU ") for line in out.splitlines())


def require_gpus(session, gpus: int, require: bool) -> None:
    """The one behaviour of every GPU session on a machine without its GPUs: say so and skip (fail where ``require``,
    FT_OVERLAY_REQUIRE_GPU=1: a script then tells a skipped session from a passed one by the exit status)."""
    if (found := count_gpus()) < gpus:
        needs = "a CUDA GPU" if gpus == 1 else f"{gpus} CUDA GPUs"
        why = f"nox -s {session.name} needs {needs} (nvidia-smi finds {found or 'none'} here)"
        if require:
            session.error(f"{why}; {REQUIRE_GPU_ENV}=1 makes that a failure")
        session.skip(why)
