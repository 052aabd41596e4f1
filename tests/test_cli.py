"""CPU tests of freetoken_overlay/cli.py (issue 34): an interrupted step says so in one line and leaves nothing."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from freetoken_overlay.util import NOX_COMMAND_ENV, NOX_ENV, REPO_ROOT


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
