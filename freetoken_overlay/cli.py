"""``python -m freetoken_overlay COMMAND``: the steps the nox sessions run.

Commands: apply, export, build (= build-wheel --install + build-kernels),
build-wheel, build-kernels, verify, kept, series-hash, series-tests, wheelhouse.  Settings come
from the environment: FT_OVERLAY_WORKDIR (work directory, an absolute path;
default ``<repo>/.work``), FT_OVERLAY_WHEELHOUSE (offline wheelhouse; also
``--wheelhouse``), FT_OVERLAY_VERBOSE=1 (pip's own output and the overlay's DEBUG
log records; also ``-v`` on the commands that run pip), TVM_FFI_CUDA_ARCH_LIST (kernel
architectures).

The modules log their progress to ``logging.getLogger(__name__)``; :func:`setup_logging`
(run by :func:`main`) shows those records on stdout as ``[freetoken-overlay] MESSAGE`` lines.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import logging
import os
import shlex
import signal
import sys
import tempfile
import tomllib
from pathlib import Path

from . import pin as pins
from . import requirements as req
from . import series
from .requirements import GPU_PYTHON
from .util import VERBOSE_ENV, OverlayError, Workdir, check_flags, nox_run, pip_source_args, verbose, wheelhouse_dir

logger = logging.getLogger(__name__)

#: Every progress line starts with this (docs and tests look for it).
LOG_PREFIX = "[freetoken-overlay]"
_HANDLER_NAME = "freetoken-overlay-cli"


class _StdoutHandler(logging.StreamHandler):
    """A handler writing to whatever ``sys.stdout`` is when a record comes (as :data:`logging.lastResort`
    does for stderr), so the lines interleave with the output of the tools the steps run."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stdout

    @stream.setter
    def stream(self, value) -> None:
        pass


def setup_logging(*, debug: bool = False) -> logging.Logger:
    """Show the package's log records (INFO and up; DEBUG too with ``debug``) on stdout, one
    ``[freetoken-overlay] MESSAGE`` line each, flushed; the handler is added once per process."""
    package = logging.getLogger(__package__)
    if not any(h.get_name() == _HANDLER_NAME for h in package.handlers):
        handler = _StdoutHandler()
        handler.set_name(_HANDLER_NAME)
        handler.setFormatter(logging.Formatter(f"{LOG_PREFIX} %(message)s"))
        package.addHandler(handler)
    package.setLevel(logging.DEBUG if debug else logging.INFO)
    return package


def _patches(args: argparse.Namespace) -> Path:
    path = Path(args.patches).resolve()
    if not path.is_dir():
        raise OverlayError(f"--patches {args.patches!r}: no such directory")
    return path


def _in_workdir(args: argparse.Namespace) -> dict:
    """The work directory, series and wheelhouse that apply and build-wheel act on (keyword arguments)."""
    return {"workdir": Workdir.from_env(), "patches_dir": _patches(args), "wheelhouse": wheelhouse_dir(args.wheelhouse)}


def cmd_apply(args: argparse.Namespace) -> None:
    if (args.upstream is None) != (args.rev is None):
        raise OverlayError("--upstream PATH and --rev REV go together")
    if args.author is not None and args.upstream is None:
        raise OverlayError("--author is for the submission branch: use it with --upstream PATH --rev REV")
    if args.upstream is not None:
        series.apply_to_clone(Path(args.upstream).resolve(), args.rev, patches_dir=_patches(args), branch=args.branch,
                              force=args.force, author=args.author)  # fmt: skip
        return
    series.apply(pins.get_pin(args.release), **_in_workdir(args), force=args.force)


def cmd_export(args: argparse.Namespace) -> None:
    from .export import export

    export(pins.get_pin(args.release), workdir=Workdir.from_env(), patches_dir=_patches(args))


def cmd_build_wheel(args: argparse.Namespace) -> None:
    from .wheel import build_wheel, install_wheel

    wheel = build_wheel(pins.get_pin(args.release), **_in_workdir(args))
    if args.install:
        install_wheel(wheel)


def _missing_for_kernels(missing: str) -> OverlayError:
    """How to get what ``build-kernels`` needs into this Python when ``missing`` (a module) is not there."""
    python = shlex.quote(sys.executable)
    closure = " ".join(shlex.quote(r) for r in (req.TORCH_CPU, *req.IMPORT_CLOSURE, *req.dependency_group("kernel-build")))
    return OverlayError(
        f"building the kernel cache imports the patched freetoken, which needs torch and its import closure; "
        f"this Python ({sys.executable}) has no module {missing!r}\n"
        "run it through nox, which installs them into .nox/patched/: nox -s build\n"
        f"or install them into this Python ({req.TORCH_CPU} is the CPU build; a GPU machine keeps its own torch): "
        f"{python} -m pip install {closure} && {python} -m pip install --no-deps {' '.join(req.NO_DEPS)}"
    )


def cmd_build_kernels(args: argparse.Namespace) -> None:
    from .kernel_cache import build_kernel_cache

    try:
        importlib.import_module("freetoken.kernel.aot")  # torch, tvm_ffi, ... and the patched freetoken itself
    except ModuleNotFoundError as exc:
        raise _missing_for_kernels(exc.name or str(exc)) from None
    build_kernel_cache(Workdir.from_env(), pip_args=pip_source_args(wheelhouse_dir(args.wheelhouse)))


def cmd_build(args: argparse.Namespace) -> None:
    if importlib.util.find_spec("torch") is None:  # before building anything: the kernel step needs it
        raise _missing_for_kernels("torch")
    args.install = True
    cmd_build_wheel(args)
    cmd_build_kernels(args)


def cmd_verify(args: argparse.Namespace) -> None:
    from .upstream import load_source_tree

    pin = pins.get_pin(args.release)
    names = sorted(pin.wheels) if args.all_wheels else None
    load_source_tree(pin, cache=Workdir.from_env().wheels, wheelhouse=wheelhouse_dir(args.wheelhouse), names=names)
    logger.info(f"FreeToken {pin.version}: tree {pin.tree_id}, base commit {pin.base_commit}")


def cmd_series_hash(args: argparse.Namespace) -> None:
    patches = _patches(args)
    if not series.patch_files(patches):
        raise OverlayError(f"--patches {args.patches!r}: holds no *.patch files, so there is no series to hash")
    print(series.series_hash(patches))


def cmd_kept(args: argparse.Namespace) -> None:
    from .workrepo import branch_tip, file_patch_ids, kept_refs, patch_ids, q, series_branch

    pin = pins.get_pin(args.release)
    repo, branch = series.work_repo(Workdir.from_env()), series_branch(pin)
    if not (repo / ".git").is_dir():
        raise OverlayError(f"{repo} does not exist, so nothing is kept")
    known = set(file_patch_ids(repo, series.patch_files(_patches(args))))
    if branch_tip(repo, branch):
        known |= set(patch_ids(repo, pin.tag, branch))
    kept = kept_refs(repo, pin.tag, branch, known)
    if not kept:
        logger.info(f"{repo}: no kept/{branch}-* branches")
    for name, lost in kept.items():
        if lost:
            logger.info(f"{name}: keep it: {len(lost)} commit(s) in neither {branch} nor patches/:"
                        + "".join(f"\n  {c}" for c in lost))  # fmt: skip
        else:
            logger.info(f"{name}: safe to drop (its commits are in {branch} or patches/): git -C {q(repo)} branch -D {name}")


def cmd_series_tests(args: argparse.Namespace) -> None:
    from .series_tests import lay_out, pytest_in

    with tempfile.TemporaryDirectory(prefix="series-tests-") as tmp:
        lay_out(series.work_repo(Workdir.from_env()), Path(tmp, "upstream"))
        logger.info(f"the series' tests in upstream's layout, in {tmp}/upstream")
        if status := pytest_in(Path(tmp, "upstream"), args.pytest_args):
            raise OverlayError(f"the series' tests failed in upstream's layout (pytest exited {status})")


def cmd_wheelhouse(args: argparse.Namespace) -> None:
    from .wheelhouse import download_wheelhouse

    download_wheelhouse(Path(args.dir).resolve(), pins.get_pin(args.release), workdir=Workdir.from_env(),
                        python_version=args.python_version)  # fmt: skip


def tool_version() -> str:
    """This tool's version: the checkout's pyproject.toml, else the installed distribution's."""
    try:
        return req.pyproject()["project"]["version"]
    except (OSError, KeyError, tomllib.TOMLDecodeError):
        return importlib.metadata.version("freetoken-overlay")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m freetoken_overlay", description=__doc__.split("\n")[0])
    version = f"freetoken_overlay {tool_version()} (pinned FreeToken {pins.DEFAULT_VERSION})"
    parser.add_argument("--version", action="version", version=version)
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    def command(name: str, func, help: str, *, patches: bool = True, wheelhouse: bool = True, pip: bool = True,
                locks: bool = True):
        sub = commands.add_parser(name, help=help, description=help)
        sub.set_defaults(func=func, verbose=False, locks=locks)
        sub.add_argument("--release", default=pins.DEFAULT_VERSION, choices=sorted(pins.PINS),
                         help=f"pinned upstream FreeToken release (default {pins.DEFAULT_VERSION})")  # fmt: skip
        if pip:  # only where pip runs (a download, an install)
            sub.add_argument("-v", "--verbose", action="store_true", help=f"show pip's output (or ${VERBOSE_ENV}=1)")
        if patches:
            sub.add_argument("--patches", default=str(series.PATCHES_DIR), help="the series (default: %(default)s)")
        if wheelhouse:
            sub.add_argument("--wheelhouse", help="offline wheel directory (default $FT_OVERLAY_WHEELHOUSE)")
        return sub

    apply = command("apply", cmd_apply, "build the work repo and git-am the series onto branch decode-gather")
    apply.add_argument("--upstream", metavar="PATH", help="apply onto this upstream clone instead")
    apply.add_argument("--rev", metavar="REV", help="with --upstream: the commit to branch off")
    apply.add_argument("--author", metavar="'NAME <EMAIL>'", help="with --upstream: author and commit the branch as "
                       "this person, dated now (patches/ keeps each patch's own)")  # fmt: skip
    apply.add_argument("--branch", default=series.BRANCH, help=f"with --upstream: branch (default {series.BRANCH})")
    apply.add_argument("--force", action="store_true", help="move the series branch to patches/ even where it holds "
                       "commits patches/ does not (its old tip stays named: a branch or tag there, else a new kept/ "
                       "branch, printed) / with --upstream: move an existing branch (its old tip kept the same way)")
    command("export", cmd_export, "write patches/ from upstream-<version>..decode-gather", wheelhouse=False, pip=False)
    wheel = command("build-wheel", cmd_build_wheel, "build the patched wheel into <workdir>/dist/")
    wheel.add_argument("--install", action="store_true", help="pip install --no-deps --force-reinstall it")
    command("build-kernels", cmd_build_kernels, "build the series' AOT kernel cache (needs the patched freetoken)",
            patches=False)  # fmt: skip
    command("build", cmd_build, "build-wheel --install, then build-kernels")
    verify = command("verify", cmd_verify, "check the pinned wheels' sha256 and source tree id", patches=False)
    verify.add_argument("--all-wheels", action="store_true", help="every accepted wheel, not just one")
    command("kept", cmd_kept, "list the kept/decode-gather-* branches apply made, and which are safe to drop",
            wheelhouse=False, pip=False, locks=False)  # fmt: skip
    command("series-hash", cmd_series_hash, "print the series hash of patches/", wheelhouse=False, pip=False,
            locks=False)  # fmt: skip
    tests = command("series-tests", cmd_series_tests, "run the series' tests in upstream's layout, in a temporary "
                    "tree: pytest tests/moe tests/kernels [-- ARGS]", patches=False, wheelhouse=False, pip=False)
    tests.add_argument("pytest_args", nargs="*", metavar="ARGS", help="pytest's arguments, after --")
    house = command("wheelhouse", cmd_wheelhouse, "download the wheels the offline GPU machine lacks into DIR",
                    patches=False, wheelhouse=False)  # fmt: skip
    house.add_argument("dir", metavar="DIR")
    house.add_argument("--python-version", default=GPU_PYTHON, help=f"the GPU machine's Python (default {GPU_PYTHON})")
    return parser


class Interrupted(KeyboardInterrupt):
    """SIGINT, SIGTERM or SIGHUP, raised where the step is, so its ``finally`` and ``with`` blocks remove what it
    made aside before the process exits."""


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def _on_signal(signum: int, _frame) -> None:
    """The first signal interrupts the step; later ones (nox's SIGTERM a moment after a Ctrl-C, a second Ctrl-C)
    are ignored, here and in the git commands the clean-up runs, so nothing cuts the clean-up short."""
    for other in _SIGNALS:
        signal.signal(other, signal.SIG_IGN)
    raise Interrupted(signum)


def _step(args: argparse.Namespace) -> None:
    """Run the command, holding the work directory's lock where it changes the work directory."""
    if not args.locks:
        args.func(args)
        return
    from .lock import work_lock

    nox = nox_run()
    with work_lock(Workdir.from_env(), f"freetoken_overlay {args.command}" + (f", for {nox}" if nox else "")):
        args.func(args)


def _who(command: str) -> str:
    """What a refusal or an interruption names: the command the user ran (under nox, its command line)."""
    try:
        return nox_run() or f"freetoken_overlay {command}"
    except OverlayError:  # $FT_OVERLAY_NOX misspelt: refused, by this name
        return f"freetoken_overlay {command}"


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.verbose:
        os.environ[VERBOSE_ENV] = "1"
    setup_logging()
    for signum in _SIGNALS:
        signal.signal(signum, _on_signal)
    try:
        check_flags()
        setup_logging(debug=verbose())
        _step(args)
    except OverlayError as exc:
        print(f"{_who(args.command)}: error: {exc}", file=sys.stderr, flush=True)
        return 1
    except KeyboardInterrupt as exc:  # the signals above
        signum = exc.args[0] if isinstance(exc, Interrupted) else signal.SIGINT
        print(f"{_who(args.command)}: interrupted ({signal.Signals(signum).name}); "
              "what it had made aside is removed", file=sys.stderr, flush=True)  # fmt: skip
        return 128 + signum
    return 0
