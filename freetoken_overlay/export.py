"""``export``: the series branch of the work repository -> ``patches/`` (``git format-patch``).

export writes a patch file only where that loses nothing: the file is missing, identical to what
it writes, one export wrote (its bytes unchanged since), or clean in the project's own git (so git
holds its old text).  It removes a file only when export wrote it, or when the project's git holds it
clean and its change is in a file this export writes (a reworded or renumbered commit).  Anything else (a hand edit, a
reviewer's note below ``---``, a patch file from elsewhere) stops it before a byte is written, with
the files named.  A commit that changes nothing is refused with its subject named (it would export
as an empty patch that no later apply takes).
"""

from __future__ import annotations

import logging
import os
import tempfile
from pathlib import Path

from .pin import Pin
from .series import PATCHES_DIR, series_args, patch_files, series_hash, work_repo
from .util import OverlayError, Workdir, git, git_bytes, git_out, hint
from .workrepo import branch_tip, dirt, empty_commits, head_place, on_branch, q, read_manifest, read_state
from .workrepo import refuse_if_busy, series_branch, sha256_hex, text_patch_id, write_manifest, write_state

logger = logging.getLogger(__name__)

#: ``git format-patch`` flags that make the output a pure function of the commits: no commit ids
#: (--zero-commit), no git version (--no-signature), no abbreviation-dependent index lines
#: (--full-index), and ``[PATCH]`` subjects without ``n/m`` (--no-numbered: adding a commit
#: writes one new file and leaves the others' bytes alone).  The diffstat stays (reviewers read
#: it); format-patch draws it at a fixed width whatever the terminal.  The work repository is used
#: with the user's and system git configuration hidden, so format.* / diff.* settings cannot leak in.  ``--notes``: a
#: commit's git note below ``---``, a reviewer's note of its patch, read back by apply (.notes).
FORMAT_PATCH_FLAGS = ("--zero-commit", "--no-signature", "--full-index", "--no-numbered", "--subject-prefix=PATCH",
                      "--no-cover-letter", "--no-thread", "--notes")  # fmt: skip

_HAND_EDIT = " (has changes the project's git does not hold: a hand edit or a note?)"


def clean_in_git(folder: Path) -> set[Path]:
    """The files under ``folder`` that the project's own git tracks unchanged (none outside a git checkout).
    git's output is read as bytes, NUL-separated (``-z``), so any file name (a space, a newline, a quote,
    a byte that is not UTF-8) is read as is."""

    def run(*args: str) -> list[str]:  # the project's git, with its user's configuration (their checkout)
        try:
            return os.fsdecode(git_bytes(folder, *args, hermetic=False)).split("\0")
        except OverlayError:
            return []

    top = "".join(run("rev-parse", "--show-toplevel")).removesuffix("\n")
    if not top:
        return set()
    tracked = {Path(top, p).resolve() for p in run("ls-files", "-z", "--full-name", "--", ".") if p}
    changed: set[Path] = set()
    entries = iter(run("status", "--porcelain", "-z", "--untracked-files=no", "--", "."))
    for entry in entries:  # "XY PATH", relative to the top; a rename or copy is followed by its source path
        if entry:
            changed.add(Path(top, entry[3:]).resolve())
            if {"R", "C"} & set(entry[:2]):
                changed.add(Path(top, next(entries, "")).resolve())
    return tracked - changed


def format_patches(repo: Path, base: str, tip: str) -> dict[str, bytes]:
    """``git format-patch`` of ``base..tip``: file name -> bytes."""
    with tempfile.TemporaryDirectory(prefix="ft-overlay-export-") as tmp:
        git(repo, "format-patch", *FORMAT_PATCH_FLAGS, "-o", tmp, f"{base}..{tip}")
        return {p.name: p.read_bytes() for p in Path(tmp).glob("*.patch")}


def _plan(repo: Path, patches_dir: Path, new: dict[str, bytes], written: dict[str, str]
          ) -> tuple[list[Path], list[Path], list[str]]:  # fmt: skip
    """(files to write, files to remove, why others stop it).  A file no longer in the series is removed
    where export wrote it, or where git holds it and its change is in a new file (a renamed commit)."""
    clean = clean_in_git(patches_dir)
    moved = {text_patch_id(repo, data) for data in new.values()} - {""}
    writes, removes, problems = [], [], []
    for name, data in sorted(new.items()):
        target = patches_dir / name
        if not target.exists():
            writes.append(target)
            continue
        old = target.read_bytes() if target.is_file() else None
        if old == data:
            continue
        if old is not None and (target.resolve() in clean or written.get(name) == sha256_hex(old)):
            writes.append(target)
        else:
            problems.append(f"  {target}{_HAND_EDIT}")
    for path in patch_files(patches_dir):
        if path.name not in new:
            data = path.read_bytes()
            ours = written.get(path.name) == sha256_hex(data)
            if ours or (path.resolve() in clean and text_patch_id(repo, data) in moved):
                removes.append(path)
            else:
                problems.append(f"  {path} (no longer in the series, and export did not write it; "
                                f"git rm {q(path)} drops it)")
    if (writes or removes) and not writable(patches_dir):
        problems.append(f"  {patches_dir} (not writable)")
    return writes, removes, problems


def writable(folder: Path) -> bool:
    """Whether export may write into ``folder``: this user can (``os.access``), and its mode has a write bit (root
    can write anywhere; a folder made read-only with ``chmod a-w`` is refused for root too)."""
    return os.access(folder, os.W_OK) and bool(folder.stat().st_mode & 0o222)


def export(pin: Pin, *, workdir: Workdir, patches_dir: Path | None = None) -> list[Path]:
    """Write ``patches/*.patch`` from ``upstream-<version>..<series branch>``; the series' files.
    Refused (nothing written) while HEAD is off the series branch or an operation is in progress,
    when a commit is empty, when patches/ changed since the repository was applied or exported
    (a pull: apply first), and where a file would lose something (see the module docstring)."""
    patches_dir = patches_dir or PATCHES_DIR
    args, branch, repo = series_args(pin, patches_dir), series_branch(pin), work_repo(workdir)
    if not (repo / ".git").is_dir():
        raise OverlayError(f"{repo} does not exist: run {hint('apply', *args)} first")
    refuse_if_busy(repo, "export", hint("export", *args))
    if not on_branch(repo, branch):
        raise OverlayError(f"{repo}: HEAD is {head_place(repo)}; export writes patches/ from branch {branch} only\n"
                           f"to export {branch}, run git -C {repo} switch {branch}, then {hint('export', *args)}\n"
                           f"to export the other branch's work, bring it onto {branch} first (rebase or cherry-pick)")
    if branch_tip(repo, branch) is None:  # on the branch (checked above) with no commit yet
        raise OverlayError(f"{repo} has no commits yet: its first apply did not finish; "
                           f"run {hint('apply', *args)} again")
    if status := git_out(repo, "status", "--porcelain"):
        logger.warning(f"warning: {dirt(status)} in {repo} are not exported "
            f"(commit them there first: git -C {repo} add -A && git -C {repo} commit):\n{status}")  # fmt: skip
    head = git_out(repo, "rev-parse", f"refs/heads/{branch}")
    if empty := empty_commits(repo, pin.tag, head):
        listed = "".join(f"\n  {s}" for s in empty)
        raise OverlayError(f"{branch} has commits that change nothing (they would export as empty patches):{listed}\n"
                           f"drop them (git -C {q(repo)} rebase -i {pin.tag}), then run {hint('export', *args)}")  # fmt: skip
    new = format_patches(repo, pin.tag, head)
    patches_dir.mkdir(parents=True, exist_ok=True)
    recorded, applied = read_state(repo, branch)
    now = series_hash(patches_dir)
    current = {p.name: p.read_bytes() for p in patch_files(patches_dir)}
    writes, removes, problems = _plan(repo, patches_dir, new, read_manifest(repo, branch))
    edited = [p for p in problems if p.endswith(_HAND_EDIT)]  # named first: an edit, not a pull, is what changed
    if recorded is not None and recorded != now and current != new and not edited:
        if head != applied:  # commits not in patches/: a plain apply refuses, --force is the way on
            way = (f"{branch} holds commits patches/ does not, so run {hint('apply', *args, '--force')}: it keeps "
                   f"the old tip named and prints the git cherry-pick that carries them over; run that, then export")
        else:
            way = f"run {hint('apply', *args)} first, then export"
        raise OverlayError(f"patches/ (series {now}) changed since {repo} was last applied or exported (series "
                           f"{recorded}), a pull or an edit; exporting now would undo that change\n{way}")
    if problems:
        raise OverlayError("export would replace or remove patch files that hold something it did not write; nothing "
                           "was written:\n" + "\n".join(problems) + "\ncommit them in this checkout (git add + git "
                           f"commit) so git keeps them, or move them aside; then run {hint('export', *args)}")
    try:
        for target in writes:
            tmp = target.with_name(f".{target.name}.tmp-{os.getpid()}")
            tmp.write_bytes(new[target.name])
            os.replace(tmp, target)
            logger.info(f"wrote {target.relative_to(patches_dir.parent)}")
        for stale in removes:
            stale.unlink()
            logger.info(f"removed {stale.relative_to(patches_dir.parent)} (no longer in the series)")
    except OSError as exc:
        raise OverlayError(f"export stopped writing {patches_dir}: {exc}") from None
    series = series_hash(patches_dir)
    write_state(repo, branch, series, head)
    write_manifest(repo, branch, new)
    logger.info(f"exported {len(new)} patch(es) from {pin.tag}..{branch} ({head}); series {series}")
    if writes or removes:
        where = "patches/" if patches_dir.resolve() == PATCHES_DIR.resolve() else q(patches_dir)  # nox runs at the root
        logger.info(f"next: review git status {where} (a new patch file is untracked) and git diff {where}, "
                    f"then git add {where} && git commit")  # fmt: skip
    return patch_files(patches_dir)
