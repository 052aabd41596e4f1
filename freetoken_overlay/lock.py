"""One lock per work directory: the steps that change it (apply, export, build...) take turns.

Two steps at once in one work repository raced: git's own ``index.lock`` stopped one of them, with advice
to delete the lock the other held.  :func:`work_lock` holds an exclusive ``flock`` on ``<workdir>/.lock``
for the whole step; a second step waits for it, saying in one line which process (pid, command) it waits
for.  The kernel drops the lock when its holder exits, however it exits, so no stale lock is ever left to
remove.  The file itself stays (it is the lock, not a sign of one: its text only names the last holder).
"""

from __future__ import annotations

import fcntl
import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from .util import Workdir

logger = logging.getLogger(__name__)

LOCK_NAME = ".lock"
_held: dict[Path, int] = {}  # lock path -> depth, in this process (a step calling another takes it once)


def lock_path(workdir: Workdir) -> Path:
    return workdir.root / LOCK_NAME


def _holder(fd: int) -> str:
    text = os.pread(fd, 300, 0).decode(errors="replace").strip()
    return text or "another process (it has not written its pid yet)"


@contextmanager
def work_lock(workdir: Workdir, command: str) -> Iterator[None]:
    """Hold ``<workdir>/.lock`` (made if missing) while the block runs; wait, in one logged line, while another
    process holds it.  Re-entrant within one process."""
    path = lock_path(workdir)
    if path in _held:
        _held[path] += 1
        try:
            yield
        finally:
            _held[path] -= 1
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logger.info(f"waiting for {_holder(fd)}, which holds {path} (one step at a time in a work directory)")
            fcntl.flock(fd, fcntl.LOCK_EX)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} ({command})\n".encode(), 0)
        _held[path] = 1
        try:
            yield
        finally:
            del _held[path]
    finally:
        os.close(fd)  # releases the flock

