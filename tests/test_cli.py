"""CPU tests of freetoken_overlay/cli.py: an interrupted step says so in one line and leaves nothing, before its
process (or nox's) exits (issues 34, 38); two steps on one work directory take turns (issue 38)."""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from freetoken_overlay.util import NOX_COMMAND_ENV, NOX_ENV, NOX_RUN_ENV, REPO_ROOT

pytestmark = pytest.mark.integration  # real git, nox or the CLI in a subprocess: nox -s quick leaves it out


def _git_that_waits_in_am(bin_dir: Path, marker: Path) -> None:
    """A ``git`` first on PATH that, for ``git am``, marks that it started and waits (then never runs it)."""
    bin_dir.mkdir()
    shim = bin_dir / "git"
    shim.write_text(f'#!/bin/sh\nfor a in "$@"; do [ "$a" = am ] && {{ touch {marker}; sleep 20; exit 1; }}; done\n'
                    f'exec {shutil.which("git")} "$@"\n')  # fmt: skip
    shim.chmod(0o755)


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupted_apply_prints_one_line_and_leaves_nothing(signum: int, throwaway_series: Path,
                                                                   tmp_path: Path) -> None:  # fmt: skip
    """Ctrl-C (SIGINT to the process group, as a terminal sends it) printed a 35-line traceback; SIGTERM left a
    registered worktree and /tmp/ft-overlay-* directories behind."""
    work, tmp, marker = tmp_path / "fresh", tmp_path / "tmp", tmp_path / "in-am"
    work.mkdir()
    tmp.mkdir()
    (work / "wheels").symlink_to(tmp_path / "work" / "wheels", target_is_directory=True)
    _git_that_waits_in_am(tmp_path / "bin", marker)
    env = {k: v for k, v in os.environ.items() if k not in (NOX_ENV, NOX_COMMAND_ENV)}
    env.update(FT_OVERLAY_WORKDIR=str(work), TMPDIR=str(tmp), PATH=f"{tmp_path / 'bin'}{os.pathsep}{env['PATH']}")
    proc = subprocess.Popen([sys.executable, "-m", "freetoken_overlay", "apply", "--patches", str(throwaway_series)],
                            cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            start_new_session=True)  # fmt: skip
    deadline = time.monotonic() + 60
    while not marker.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert marker.exists(), proc.communicate()
    os.killpg(proc.pid, signum) if signum == signal.SIGINT else proc.send_signal(signum)
    _, err = proc.communicate(timeout=60)
    assert proc.returncode == 128 + signum
    assert err.strip().splitlines() == [f"freetoken_overlay apply: interrupted ({signal.Signals(signum).name}); "
                                        "what it had made aside is removed"]  # fmt: skip
    assert list(tmp.iterdir()) == []  # no ft-overlay-am-* worktree, no ft-overlay-* directory
    worktrees = subprocess.run(["git", "-C", str(work / "upstream"), "worktree", "list", "--porcelain"],
                               capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert worktrees.count("worktree ") == 1  # only the work repository itself is registered


def _shim(bin_dir: Path, body: str) -> None:
    """A ``git`` first on PATH: ``body`` (sh) runs first, then the real git."""
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f'#!/bin/sh\n{body}\nexec {shutil.which("git")} "$@"\n')
    (bin_dir / "git").chmod(0o755)


def _fresh_env(tmp_path: Path, bin_dir: Path) -> dict[str, str]:
    """The environment of a user's shell (not nox's): a fresh work directory, TMPDIR and ``bin_dir`` first on PATH."""
    work, tmp = tmp_path / "fresh", tmp_path / "tmp"
    work.mkdir()
    tmp.mkdir()
    (work / "wheels").symlink_to(tmp_path / "work" / "wheels", target_is_directory=True)
    env = {k: v for k, v in os.environ.items() if k not in (NOX_ENV, NOX_COMMAND_ENV, NOX_RUN_ENV, "VIRTUAL_ENV")}
    env.update(FT_OVERLAY_WORKDIR=str(work), TMPDIR=str(tmp), PATH=f"{bin_dir}{os.pathsep}{env['PATH']}")
    return env


def _wait_for(path: Path, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + 60
    while not path.exists() and proc.poll() is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert path.exists(), proc.communicate()


def test_two_applies_at_once_take_turns(throwaway_series: Path, tmp_path: Path) -> None:
    """Two applies on one (fresh) work directory: one died in git (`tag 'upstream-0.2.1' already exists`, `cannot
    lock ref`, or `index.lock': File exists ... remove the file manually`).  Now the second waits, saying for whom."""
    marker = tmp_path / "in-am"
    _shim(tmp_path / "bin", f'for a in "$@"; do [ "$a" = am ] && [ ! -e {marker} ] && {{ touch {marker}; sleep 2; }}; done')
    env = _fresh_env(tmp_path, tmp_path / "bin")
    cmd = [sys.executable, "-m", "freetoken_overlay", "apply", "--patches", str(throwaway_series)]
    first = subprocess.Popen(cmd, cwd=REPO_ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_for(marker, first)  # it holds the work directory, in its first git am
    second = subprocess.run(cmd, cwd=REPO_ROOT, env=env, capture_output=True, text=True, timeout=120)
    out, err = first.communicate(timeout=120)
    assert first.returncode == 0 and second.returncode == 0, (err, second.stderr)
    lock = Path(env["FT_OVERLAY_WORKDIR"]) / ".lock"
    assert f"waiting for pid {first.pid} (freetoken_overlay apply), which holds {lock}" in second.stdout
    assert "up to date" in second.stdout
    assert not [bad for bad in ("index.lock", "already exists", "cannot lock") if bad in err + second.stderr]


@pytest.mark.parametrize("whom", ["group", "nox"])
def test_nox_returns_only_once_an_interrupted_step_has_cleaned_up(whom: str, throwaway_series: Path,
                                                                 tmp_path: Path) -> None:  # fmt: skip
    """`timeout 1 nox -s apply` (SIGTERM to nox's process group) or `kill <nox>`: nox exited at once while the step
    was still removing its worktree, so /tmp/ft-overlay-am-* and a prunable worktree were there after the prompt
    came back.  Checked at once after nox exits (the clean-up's `git worktree remove` made a second slower)."""
    nox = shutil.which("nox", path=os.environ.get("PATH", "").replace(str(Path(sys.executable).parent), ""))
    if nox is None:
        pytest.skip("no nox on PATH")
    marker = tmp_path / "in-am"
    _shim(tmp_path / "bin", f'case "$1 $2" in "worktree remove") sleep 1;; esac\n'
                            f'for a in "$@"; do [ "$a" = am ] && {{ touch {marker}; exec sleep 30; }}; done')
    env = _fresh_env(tmp_path, tmp_path / "bin")
    args = [nox, "--envdir", str(tmp_path / "envs"), "-s", "apply", "--", "--patches", str(throwaway_series)]
    log = tmp_path / "nox.log"  # a file, not a pipe: waiting for a pipe's end would wait for the step too
    with log.open("w") as sink:
        proc = subprocess.Popen(args, cwd=REPO_ROOT, env=env, stdout=sink, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip
    _wait_for(marker, proc)
    os.killpg(proc.pid, signal.SIGTERM) if whom == "group" else proc.send_signal(signal.SIGTERM)
    proc.wait(timeout=120)
    left = sorted(p.name for p in (tmp_path / "tmp").iterdir())
    worktrees = subprocess.run(["git", "-C", env["FT_OVERLAY_WORKDIR"] + "/upstream", "worktree", "list",
                                "--porcelain"], capture_output=True, text=True, check=True).stdout  # fmt: skip
    out = log.read_text()
    assert proc.returncode != 0 and left == [] and worktrees.count("worktree ") == 1 and "prunable" not in worktrees, out
    typed = shlex.join(["nox", *args[1:]])  # what the step names: the command the user typed
    assert f"{typed}: interrupted (SIGTERM); what it had made aside is removed" in out
