"""An interrupt always stops (freetoken_overlay.sessions): SIGINT or SIGTERM at any moment of a nox session ends nox
with 130 or 143, names the signal, runs no later session and leaves none of the session's processes behind (pytest,
its xdist workers, what they started).  The signal comes at chosen points, never after a delay: at a session's start
and its last moment ($FT_OVERLAY_SIGNAL_AT), and from a test while the session's pytest runs."""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from freetoken_overlay.sessions import SIGNAL_AT_ENV
from freetoken_overlay.util import REPO_ROOT

pytestmark = pytest.mark.integration

#: A noxfile whose first session runs pytest (spread over two workers where pytest-xdist is installed), each test
#: starting a process of its own (with $SIGNAL_FROM_TEST, the first test sends nox that signal, then all wait), then a
#: process that sends nox $SIGNAL_AS_IT_EXITS and exits 0 at once (nox took that for a success: a Ctrl-C ignored).
NOXFILE = """
import os, sys
sys.path.insert(0, {root!r})
import nox
from freetoken_overlay import sessions
sessions.install()

@nox.session(python=False)
@sessions.around
def first(session):
    env = {{"NOX_PID": str(os.getpid())}}
    session.run({python!r}, "-m", "pytest", "-q", "-p", "no:cacheprovider", *{spread!r}, "test_wait.py", env=env,
                external=True)
    if os.environ.get("SIGNAL_AS_IT_EXITS"):
        session.run(sys.executable, "-c", "import os, signal; os.kill(int(os.environ['NOX_PID']), "
                    "getattr(signal, os.environ['SIGNAL_AS_IT_EXITS']))", env=env, external=True)

@nox.session(python=False)
@sessions.around
def second(session):
    session.log("the second session ran")
"""

TESTS = """
import os, signal, subprocess, sys, time

def wait(first):
    if os.environ.get("SIGNAL_FROM_TEST"):
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        if first:
            os.kill(int(os.environ["NOX_PID"]), getattr(signal, os.environ["SIGNAL_FROM_TEST"]))
        time.sleep(600)

def test_first():
    wait(True)

def test_second():
    wait(False)
"""


def _nox() -> str:
    nox = shutil.which("nox", path=os.environ.get("PATH", "").replace(str(Path(sys.executable).parent), ""))
    if nox is None:
        pytest.skip("no nox on PATH")
    return nox


def _left(mark: str) -> list[str]:
    """The command lines of the live processes whose environment holds ``mark``."""
    left = []
    for entry in os.scandir("/proc"):
        try:
            if entry.name.isdigit() and mark.encode() in Path(entry.path, "environ").read_bytes().split(b"\0"):
                left.append(Path(entry.path, "cmdline").read_bytes().replace(b"\0", b" ").decode())
        except OSError:  # gone, or not ours to read
            pass
    return left


def _run_nox(args: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """nox ``args`` with ``env``, each of its processes marked; what it did and the marked processes left after it."""
    mark = f"FT_TEST_INTERRUPT={uuid.uuid4().hex}"
    outer = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "NOX_", "FT_OVERLAY_NOX"))}
    proc = subprocess.run([_nox(), *args], cwd=cwd, env={**outer, **env, mark.split("=")[0]: mark.split("=")[1]},
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=120)  # fmt: skip
    return proc, _left(mark)


@pytest.mark.skipif(not os.path.isdir("/proc"), reason="finds the processes left in /proc")
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
@pytest.mark.parametrize("point", ["start", "test", "exit", "end"])
def test_a_signal_at_any_point_stops_nox_and_every_process_it_started(point: str, signum: int, tmp_path: Path) -> None:
    spread = ["-n", "2"] if importlib.util.find_spec("xdist") else []
    (tmp_path / "noxfile.py").write_text(NOXFILE.format(root=str(REPO_ROOT), python=sys.executable, spread=spread))
    (tmp_path / "test_wait.py").write_text(TESTS)
    (tmp_path / "pytest.ini").write_text("[pytest]\n")  # its own root: not the checkout's, in which tmp_path is
    name = signal.Signals(signum).name
    env = {"test": {"SIGNAL_FROM_TEST": name}, "exit": {"SIGNAL_AS_IT_EXITS": name}}.get(point) or \
        {SIGNAL_AT_ENV: f"{point}:first {name}"}  # fmt: skip
    proc, left = _run_nox(["--envdir", str(tmp_path / "envs"), "-s", "first", "second"], env, tmp_path)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 128 + signum, out
    assert name in out and "Running session first" in out, out
    assert "Running session second" not in out and "the second session ran" not in out, out
    assert left == [], left
    if point in ("exit", "end"):  # the session had done all its work: it stopped all the same
        assert " passed" in out, out


def test_the_noxfile_stops_at_a_session_s_last_moment(tmp_path: Path) -> None:
    """The project's own sessions: a signal as a session ends (it exited 0 and ran the next one) or starts."""
    args = ["--envdir", str(tmp_path / "envs"), "-s", "compare", "wheelhouse", "--", "--help"]
    for at, code in (("end:compare SIGTERM", 143), ("start:compare SIGINT", 130)):
        proc, left = _run_nox(args, {SIGNAL_AT_ENV: at}, REPO_ROOT)
        out = proc.stdout + proc.stderr
        assert proc.returncode == code and at.split()[1] in out, out
        assert "Running session wheelhouse" not in out and left == [], out
    proc, _ = _run_nox(args, {SIGNAL_AT_ENV: "end:compare SIGTERMINATE"}, REPO_ROOT)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1 and f"{SIGNAL_AT_ENV}='end:compare SIGTERMINATE'; allowed: " in out, out
