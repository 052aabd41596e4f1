"""Small shared helpers: errors, environment settings, paths, git.

Everything in :mod:`freetoken_overlay` except :mod:`freetoken_overlay.kernel_cache`
uses the standard library only, so it runs in any Python >= 3.11 (the nox
process itself, or a session's virtual environment) without installing
anything.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

logger = logging.getLogger(__name__)

#: The repository that holds this package (patches/, tests/, noxfile.py, ...).
REPO_ROOT = Path(__file__).resolve().parent.parent

WORKDIR_ENV = "FT_OVERLAY_WORKDIR"
WHEELHOUSE_ENV = "FT_OVERLAY_WHEELHOUSE"
#: Read by the nox sessions: =1 reuses the torch, triton, ... of the Python running nox (``nox --no-venv`` runs in it).
SYSTEM_SITE_ENV = "FT_OVERLAY_SYSTEM_SITE"
VERBOSE_ENV = "FT_OVERLAY_VERBOSE"
#: Read by the noxfile: a GPU session on a machine without its GPUs fails instead of skipping (for scripts).
REQUIRE_GPU_ENV = "FT_OVERLAY_REQUIRE_GPU"
#: Set by the nox sessions (sessions.around): advice names ``nox -s ...`` rather than this CLI.
NOX_ENV = "FT_OVERLAY_NOX"
#: Set by the nox sessions: how nox was started (``nox`` or ``python3 -m nox``), for that advice.
NOX_COMMAND_ENV = "FT_OVERLAY_NOX_COMMAND"
#: Set by the nox sessions: the nox command line as typed (``nox -s test``): what a refusal names, to run again.
NOX_RUN_ENV = "FT_OVERLAY_NOX_RUN"

_TRUE = ("1", "true", "yes", "on")
_FALSE = ("", "0", "false", "no", "off")


class OverlayError(Exception):
    """A failure with a message meant for the user; the CLI prints it and exits 1."""


def env_flag(name: str, environ: Mapping[str, str] | None = None) -> bool:
    """Read a boolean environment variable; refuse anything but the usual spellings."""
    raw = (os.environ if environ is None else environ).get(name, "")
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    allowed = ", ".join(repr(v) for v in (*_TRUE, *_FALSE))
    raise OverlayError(f"{name}={raw!r} is not a boolean; allowed values: {allowed}")


def verbose() -> bool:
    """Whether pip and the other tools show their own output ($FT_OVERLAY_VERBOSE, or ``-v``; the CLI
    then also shows the overlay's DEBUG log records)."""
    return env_flag(VERBOSE_ENV)


def check_flags() -> None:
    """Refuse a boolean setting spelled other than :func:`env_flag` allows, whether or not this run reads it."""
    for name in (VERBOSE_ENV, SYSTEM_SITE_ENV, NOX_ENV, REQUIRE_GPU_ENV):
        env_flag(name)


def hint(command: str, *args: str) -> str:
    """How to run the step ``command args...`` here: ``nox -s COMMAND -- ARGS`` under nox
    ($FT_OVERLAY_NOX; ``python3 -m nox`` when nox was started that way), else
    ``python3 -m freetoken_overlay COMMAND ARGS``."""
    quoted = [shlex.quote(a) for a in args]
    if env_flag(NOX_ENV):
        nox = os.environ.get(NOX_COMMAND_ENV, "").strip() or "nox"
        return " ".join([nox, "-s", command, *(["--", *quoted] if quoted else [])])
    return " ".join(["python3 -m freetoken_overlay", command, *quoted])


def nox_run() -> str | None:
    """Under nox, the nox command line as the user typed it ($FT_OVERLAY_NOX_RUN, e.g. ``nox -s test``): what a
    refusal names, whichever session's step refused (``test`` requires ``patched``, whose step builds the wheel)."""
    return (os.environ.get(NOX_RUN_ENV, "").strip() or None) if env_flag(NOX_ENV) else None


def running(command: str = "build") -> str:
    """The command to run again after a refusal: :func:`nox_run` under nox, else this CLI's command line
    (``command`` where this process is not the CLI)."""
    cli = bool(sys.argv) and Path(sys.argv[0]).parent.name == __package__
    return nox_run() or " ".join(["python3 -m freetoken_overlay", *map(shlex.quote, sys.argv[1:] if cli else [command])])


def env_dir(name: str, *, must_exist: bool, environ: Mapping[str, str] | None = None) -> Path | None:
    """Read a directory path from an environment variable (unset or empty: None)."""
    raw = (os.environ if environ is None else environ).get(name, "").strip()
    if not raw:
        return None
    path = Path(raw).expanduser().resolve()
    if must_exist and not path.is_dir():
        raise OverlayError(f"{name}={raw!r}: no such directory ({path})")
    if not must_exist and path.exists() and not path.is_dir():
        raise OverlayError(f"{name}={raw!r}: exists and is not a directory ({path})")
    return path


def wheelhouse_dir(explicit: str | os.PathLike[str] | None = None) -> Path | None:
    """The offline wheelhouse: ``explicit`` (from ``--wheelhouse``), else $FT_OVERLAY_WHEELHOUSE."""
    if explicit is not None:
        path = Path(explicit).expanduser().resolve()
        if not path.is_dir():
            raise OverlayError(f"--wheelhouse {str(explicit)!r}: no such directory ({path})")
        return path
    return env_dir(WHEELHOUSE_ENV, must_exist=True)


def pip_source_args(wheelhouse: Path | None) -> list[str]:
    """pip options that make it install from the offline wheelhouse only (none: its index)."""
    return ["--no-index", "--find-links", str(wheelhouse)] if wheelhouse is not None else []


@dataclass(frozen=True)
class Workdir:
    """The ignored work directory (default ``<repo>/.work``, or $FT_OVERLAY_WORKDIR).

    Layout (other tools rely on it):

    * ``upstream/``       git repo: tag ``upstream-<version>`` and branch ``decode-gather``
      (``decode-gather-<version>`` for a non-default pinned version, e.g. 0.2.0)
    * ``wheels/``         verified official wheels (download cache)
    * ``dist/``           patched wheels ``freetoken-<v>+dg.<series hash>-...whl``
    * ``kernel-cache/``   AOT kernel cache built by ``build`` (FREETOKEN_KERNEL_CACHE_DIR)
    * ``kernel-build/``   its intermediate build files
    * ``sass-cache/``     the SASS tests' cubins and listings, by their inputs (conformance/conftest.py; safe to delete)
    * ``pycache/``        bytecode of ``nox -s test``/``quick`` under PYTHONDONTWRITEBYTECODE (safe to delete)
    * ``session/NAME/``   test session NAME's TMPDIR, XDG_CACHE_HOME, pytest's --basetemp (sessions.py; safe to delete)

    ``upstream/`` is created once and never deleted, moved or recreated by the tools (another
    release is another tag and branch in it).  ``git clean -xfd`` in the checkout deletes ``.work/`` (it is
    ignored) but ``upstream/``, a repository of its own (``git clean -xffd`` deletes it too): use
    ``git clean -fd`` (keeps ignored files) or ``git clean -xfd -e .work``.

    $FT_OVERLAY_WORKDIR must be an absolute path (or start with ``~``): nox runs the
    sessions from the checkout root, so a relative one would land inside the checkout,
    where git does not ignore it.
    """

    root: Path

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Workdir:
        raw = (os.environ if environ is None else environ).get(WORKDIR_ENV, "").strip()
        if raw and not Path(raw).expanduser().is_absolute():
            raise OverlayError(
                f"{WORKDIR_ENV}={raw!r} is a relative path; allowed: an absolute path (or one starting with ~), "
                f"e.g. {WORKDIR_ENV}=$PWD/{raw} (nox runs from the checkout root, so a relative work "
                "directory would land inside the checkout, where git does not ignore it)"
            )
        return cls(env_dir(WORKDIR_ENV, must_exist=False, environ=environ) or REPO_ROOT / ".work")

    wheels = property(lambda self: self.root / "wheels")
    dist = property(lambda self: self.root / "dist")
    kernel_cache = property(lambda self: self.root / "kernel-cache")
    kernel_build = property(lambda self: self.root / "kernel-build")


def verify_sha256(path: Path, expected: str) -> None:
    """Refuse ``path`` unless its sha256 is ``expected``."""
    with path.open("rb") as handle:
        actual = hashlib.file_digest(handle, "sha256").hexdigest()
    if actual != expected:
        raise OverlayError(f"{path}: sha256 mismatch (expected {expected}, actual {actual}); refusing to use it")


# Fixed identity used for every commit the overlay makes, so commit ids are stable.
OVERLAY_NAME = "freetoken-overlay"
OVERLAY_EMAIL = "freetoken-overlay@invalid"


def git_env(*, hermetic: bool, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """Environment for git: C locale, UTC, the overlay committer identity.  ``hermetic`` also hides the user's and
    the system's git configuration (format.*, diff.*, am.*, init.defaultBranch, ...), so that the overlay's own work
    repository behaves the same on every machine."""
    env = dict(os.environ)
    env.update(LC_ALL="C", LANG="C", TZ="UTC", GIT_COMMITTER_NAME=OVERLAY_NAME, GIT_COMMITTER_EMAIL=OVERLAY_EMAIL,
               GIT_TERMINAL_PROMPT="0", GIT_EDITOR="true", GIT_PAGER="cat")  # fmt: skip
    if hermetic:
        env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull)
    for key in ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE"):
        env.pop(key, None)
    if extra:
        env.update(extra)
    return env


def git(repo: Path, *args: str, hermetic: bool = True, env: Mapping[str, str] | None = None, check: bool = True,
        capture: bool = True, input: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
    """Run ``git -C repo args...`` (``input`` on its stdin); on failure raise :class:`OverlayError`
    with git's output."""
    pipe = subprocess.PIPE if capture else None
    proc = subprocess.run(["git", "-C", str(repo), *args], env=git_env(hermetic=hermetic, extra=env), input=input,
                          text=True, stdout=pipe, stderr=pipe, check=False)  # fmt: skip
    if check and proc.returncode != 0:
        output = "\n".join(s.strip() for s in (proc.stdout, proc.stderr) if s and s.strip())
        raise OverlayError(f"git {' '.join(args)} failed in {repo} (exit {proc.returncode}):\n{output}")
    return proc


def git_out(repo: Path, *args: str, hermetic: bool = True) -> str:
    """``git args...`` in ``repo``; its stdout, stripped."""
    return git(repo, *args, hermetic=hermetic).stdout.strip()


def git_bytes(repo: Path, *args: str, hermetic: bool = True) -> bytes:
    """Raw stdout of ``git args...`` in ``repo`` (for blob contents, and NUL-separated ``-z`` output)."""
    proc = subprocess.run(["git", "-C", str(repo), *args], env=git_env(hermetic=hermetic), capture_output=True)
    if proc.returncode != 0:
        raise OverlayError(f"git {' '.join(args)} failed in {repo}: {proc.stderr.decode(errors='replace')}")
    return proc.stdout


def run_checked(cmd: Sequence[str], *, what: str, env: Mapping[str, str] | None = None) -> None:
    """Run a command; raise on failure.  Its output shows only when verbose or when it fails."""
    logger.info(f"$ {' '.join(cmd)}")
    quiet = not verbose()
    proc = subprocess.run(
        list(cmd), env=None if env is None else dict(env), check=False,
        stdout=subprocess.PIPE if quiet else None, stderr=subprocess.STDOUT if quiet else None, text=True,
    )  # fmt: skip
    if proc.returncode != 0:
        if quiet and proc.stdout:  # the failed tool's own output, as it would have shown (not a log line)
            print(proc.stdout, end="" if proc.stdout.endswith("\n") else "\n", file=sys.stderr, flush=True)
        raise OverlayError(f"{what} failed (exit {proc.returncode}): {' '.join(cmd)}")


def python_tag() -> str:
    """``cp311``-style tag of the running interpreter."""
    return f"cp{sys.version_info.major}{sys.version_info.minor}"
