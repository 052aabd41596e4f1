"""The patch series: its hash and ``apply`` (patches/ -> git commits); ``export`` is :mod:`.export`.

The work repository (``<workdir>/upstream/``) holds one deterministic base commit per pinned
release, tagged ``upstream-<version>``, and the series applied on top of it with ``git am`` on
branch ``decode-gather`` (``decode-gather-<version>`` for another release).  Because the base
commit, the committer identity and the committer dates (``--committer-date-is-author-date``) are
fixed, the same series always gives the same commit ids, and ``export`` after ``apply`` gives back
``patches/`` byte for byte.

The repository is created once and never deleted, moved or recreated.  ``apply`` builds the
series' commits aside (in a temporary git worktree off the base) and then moves the series branch
to them only when its old tip is already exported (the same patch-ids as the patches export or
apply last recorded, or as patches/ now) or when asked (``--force``); the old tip always keeps a
named ref (printed).  It refuses, naming the command that goes on, while an operation is in
progress or where local changes are in the way.
"""

from __future__ import annotations

import hashlib
import logging
import re
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from .notes import attach_note
from .pin import DEFAULT_VERSION, Pin
from .upstream import load_source_tree
from .util import REPO_ROOT, OverlayError, Workdir, git, git_out, hint, running
from .workrepo import BRANCH, branch_tip, carry_notes, check_out_new_branch, checked_out_elsewhere, dirt
from .workrepo import file_patch_ids, head_place, head_ref, init_repo, keep_ref, make_base_commit, on_branch, patch_ids
from .workrepo import q, read_state, refuse_if_busy, series_branch, unfinished, write_state

logger = logging.getLogger(__name__)

__all__ = ["BRANCH", "apply", "apply_to_clone", "ensure_applied", "series_hash", "work_repo"]

PATCHES_DIR = REPO_ROOT / "patches"
SERIES_HASH_LENGTH = 12

# git am's own advice (``Patch failed at 0001``, ``git am --continue``, hints) is about
# its one-patch run in a temporary worktree, not about what to do here.
_AM_NOISE = re.compile(r"^(Applying: |Patch failed at |hint: |When you have resolved |If you prefer to skip "
                       r"|To restore the original branch |The copy of the patch )")  # fmt: skip
# the file an error line of ``git am``/``git apply`` names
_FAILED = re.compile(r"^error: (?:patch failed: (.+):\d+|(.+?): (?:patch does not apply|does not exist in index"
                     r"|already exists in index|already exists in working directory|does not match index"
                     r"|No such file or directory))$")  # fmt: skip


class PatchError(OverlayError):
    """A patch of the series does not apply: ``patch`` (the file), ``index`` (1-based) of ``count``;
    ``applied``: the commit of the patches before it."""

    def __init__(self, message: str, patch: Path, index: int, count: int, applied: str = "") -> None:
        super().__init__(message)
        self.patch, self.index, self.count, self.applied = patch, index, count, applied


def work_repo(workdir: Workdir) -> Path:
    """The work repository, ``<workdir>/upstream``: one for all releases (every pinned release's base
    is another tag, and its series another branch, in it)."""
    return workdir.root / "upstream"


def patch_files(patches_dir: Path | None = None) -> list[Path]:
    """The series, in order: ``patches/*.patch`` sorted by name."""
    return sorted((patches_dir or PATCHES_DIR).glob("*.patch"))


def series_hash(patches_dir: Path | str | None = None, *, files: Sequence[Path] | None = None) -> str:
    """Short sha256 over the bytes of ``patches_dir``'s :func:`patch_files` (or of ``files``), in order (12 hex digits).

    Patched wheels are versioned ``<version>+dg.<series hash>``; reports and
    results record it to say which series they measured.
    """
    digest = hashlib.sha256()
    for patch in patch_files(Path(patches_dir) if patches_dir is not None else None) if files is None else files:
        digest.update(patch.read_bytes())
    return digest.hexdigest()[:SERIES_HASH_LENGTH]


def _failed_files(output: str) -> list[str]:
    """The files ``git am``/``git apply`` names in its error lines, in order."""
    matches = (_FAILED.match(line.strip()) for line in output.splitlines())
    return list(dict.fromkeys(m[1] or m[2] for m in matches if m))


def am_series(repo: Path, patches: Sequence[Path], *, hermetic: bool = True, identity: Mapping[str, str] | None = None,
              notes: bool = False) -> str:  # fmt: skip
    """``git am`` each patch onto the checked-out branch of ``repo``; the new tip.

    One ``git am`` per patch, so a failure names the patch file directly. With ``identity``
    (``GIT_AUTHOR_*``/``GIT_COMMITTER_*`` variables) each commit is re-authored to it, dated now:
    a submission branch carries a real, accountable author, while ``patches/`` keeps each patch's own.
    With ``notes``, a patch's note below ``---`` becomes its commit's git note (:mod:`.notes`).
    """
    for index, patch in enumerate(patches, 1):
        dates = () if identity else ("--committer-date-is-author-date",)
        proc = git(repo, "am", *dates, "--no-3way", str(patch), hermetic=hermetic, env=identity, check=False)
        output = "\n".join(s.strip() for s in (proc.stdout, proc.stderr) if s.strip())
        if proc.returncode != 0:
            files = _failed_files(output)
            where = f" at {', '.join(files)}" if files else ""
            errors = "\n".join(line for line in output.splitlines() if not _AM_NOISE.match(line))
            raise PatchError(
                f"patch {patch.name} ({index} of {len(patches)}) does not apply{where}\n{errors}",
                patch, index, len(patches), git_out(repo, "rev-parse", "HEAD", hermetic=hermetic),
            )  # fmt: skip
        if identity:
            git(repo, "commit", "-q", "--amend", "--no-edit", "--reset-author", hermetic=hermetic, env=identity)
        if notes:
            attach_note(repo, git_out(repo, "rev-parse", "HEAD", hermetic=hermetic), patch)
        logger.info(f"[{index}/{len(patches)}] {patch.name}: {output.splitlines()[0] if output else 'applied'}")
    return git_out(repo, "rev-parse", "HEAD", hermetic=hermetic)


_AUTHOR = re.compile(r"^(?P<name>[^<>]*\S)\s*<(?P<email>[^<>\s]+@[^<>\s]+)>$")


def author_identity(author: str) -> dict[str, str]:
    """``GIT_AUTHOR_*`` and ``GIT_COMMITTER_*`` for ``"Name <email>"``; OverlayError naming the value otherwise."""
    match = _AUTHOR.match(author.strip())
    if not match:
        raise OverlayError(f"--author {author!r}: expected 'Name <email>', e.g. --author 'Ada Lovelace <ada@example.org>'")
    name, email = match["name"], match["email"]
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def build_aside(repo: Path, base: str, patches: Sequence[Path], *, hermetic: bool = True,
                identity: Mapping[str, str] | None = None, notes: bool = False) -> str:  # fmt: skip
    """The series' commits on ``base``, made in a temporary worktree of ``repo`` (its own work tree,
    index, HEAD and refs untouched); the new tip.  The worktree, made here, is removed here."""
    with tempfile.TemporaryDirectory(prefix="ft-overlay-am-") as tmp:
        worktree = Path(tmp) / "series"
        git(repo, "worktree", "add", "-q", "--detach", str(worktree), base, hermetic=hermetic)
        try:
            return am_series(worktree, patches, hermetic=hermetic, identity=identity, notes=notes)
        finally:
            git(repo, "worktree", "remove", "--force", str(worktree), hermetic=hermetic, check=False)


def series_args(pin: Pin, patches_dir: Path | None) -> list[str]:
    """The CLI options that select this release and series, for advice."""
    args = [] if pin.version == DEFAULT_VERSION else ["--release", pin.version]
    if patches_dir is not None and Path(patches_dir).resolve() != PATCHES_DIR.resolve():
        args += ["--patches", str(patches_dir)]
    return args


def _base(repo: Path, pin: Pin, workdir: Workdir, wheelhouse: Path | None, files: Mapping[str, bytes] | None) -> str:
    """The base commit of ``pin`` in ``repo``, made (from ``files``, the verified source tree, loaded here
    if not given) and tagged if missing; a tag moved elsewhere is refused."""
    tagged = git(repo, "rev-parse", "-q", "--verify", f"refs/tags/{pin.tag}^{{commit}}", check=False).stdout.strip()
    if tagged and tagged != pin.base_commit:
        raise OverlayError(f"{repo}: tag {pin.tag} is at {tagged}, not at the pinned base commit {pin.base_commit}\n"
                           f"to go on, rename it (git -C {q(repo)} tag {pin.tag}-mine {pin.tag} && git -C {q(repo)} "
                           f"tag -d {pin.tag}), then run this again")  # fmt: skip
    if not tagged:
        if files is None:
            files = load_source_tree(pin, cache=workdir.wheels, wheelhouse=wheelhouse)
        make_base_commit(repo, pin, files)
        git(repo, "tag", pin.tag, pin.base_commit)
        logger.info(f"base commit {pin.base_commit} tagged {pin.tag}")
    return pin.base_commit


def _exported(repo: Path, pin: Pin, tip: str, applied: str | None, patches: list[Path]) -> bool:
    """Whether the series in ``tip`` is what apply or export last recorded, or what patches/ holds now (same patch-ids)."""
    ids = patch_ids(repo, pin.tag, tip)
    if applied and git(repo, "cat-file", "-e", f"{applied}^{{commit}}", check=False).returncode == 0:
        if tip == applied or ids == patch_ids(repo, pin.tag, applied):
            return True
    return ids == file_patch_ids(repo, patches)


def _refuse_local_changes(repo: Path, branch: str, args: list[str]) -> None:
    """Refuse to move the checked-out ``branch`` while tracked files have uncommitted changes."""
    if status := git_out(repo, "status", "--porcelain", "--untracked-files=no"):
        raise OverlayError(f"{repo} has {dirt(status)} on {branch}, which apply would move:\n{status}\n"
                           f"commit them (git -C {q(repo)} commit -a) or set them aside (git -C {q(repo)} stash push), "
                           f"then run {hint('apply', *args)}")  # fmt: skip


def _move_branch(repo: Path, branch: str, old: str | None, new: str) -> None:
    """Point ``branch`` at ``new`` (from ``old``): with the work tree where it is checked out (git refuses
    rather than overwrite an untracked file), as a ref update elsewhere (refused if it moved meanwhile)."""
    if head_ref(repo) != f"refs/heads/{branch}":
        git(repo, "update-ref", "-m", "overlay apply", f"refs/heads/{branch}", new, old or "")
    elif old is None:
        check_out_new_branch(repo, branch, new)
    else:
        git(repo, "reset", "-q", "--keep", new)


def apply(pin: Pin, *, workdir: Workdir, patches_dir: Path | None = None, wheelhouse: Path | None = None,
          force: bool = False) -> Path:  # fmt: skip
    """Apply the series to the work repository (created if missing); its path.

    The series' commits are built aside; the series branch then moves to them when it is new, already
    holds them, or its old tip is exported (:func:`_exported`); otherwise only with ``force``.  The old
    tip keeps a named ref either way (printed).  Nothing else changes: other branches, tags, stash
    entries, HEAD elsewhere, untracked files and nested repositories stay as they are.
    """
    patches = patch_files(patches_dir)
    series = series_hash(patches_dir)
    repo, branch, args = work_repo(workdir), series_branch(pin), series_args(pin, patches_dir)
    refuse_empty(patches, args)
    files = None  # the verified source tree, read once: only a new repository needs it before _base
    if not (repo / ".git").is_dir():
        if repo.exists() and (not repo.is_dir() or any(repo.iterdir())):
            raise OverlayError(f"{repo} exists and is not a git repository; apply never moves or deletes it\nto keep "
                               f"it and go on, move it yourself: mv {q(repo)} {q(f'{repo}.not-git')} && "
                               f"{hint('apply', *args)}")  # fmt: skip
        files = load_source_tree(pin, cache=workdir.wheels, wheelhouse=wheelhouse)  # verified before anything is made
        init_repo(repo, branch)
        logger.info(f"created the work repository {repo}")
    elif unfinished(repo, branch):
        logger.info(f"{repo} has no commits yet: its first apply did not finish; finishing it")
    refuse_if_busy(repo, "apply", hint("apply", *args))
    carry_notes(repo)  # (a work repository made before the empty tree was written gets it here)
    tip = branch_tip(repo, branch)
    recorded, applied = read_state(repo, branch)
    if tip is not None and recorded == series and tip == applied:
        logger.info(f"{repo} is up to date: {branch} at {tip} (series {series}); nothing to do")
        return repo
    if elsewhere := checked_out_elsewhere(repo, branch):
        raise OverlayError(f"{repo}: {branch} is checked out in the worktree {elsewhere}; switch it to another "
                           f"branch there (git -C {q(elsewhere)} switch --detach), then run {hint('apply', *args)}")  # fmt: skip
    if on_branch(repo, branch) and tip is not None:
        _refuse_local_changes(repo, branch, args)
    base = _base(repo, pin, workdir, wheelhouse, files)
    logger.info(f"applying {len(patches)} patch(es) onto {pin.tag}")
    try:
        new = build_aside(repo, base, patches, notes=True)
    except PatchError as exc:
        raise PatchError(_patch_advice(exc, repo, branch, args), exc.patch, exc.index, exc.count, exc.applied) from None
    if tip == new:
        write_state(repo, branch, series, new)
        logger.info(f"{repo}: {branch} already holds series {series} ({new})")
        return repo
    exported = tip is None or _exported(repo, pin, tip, applied, patches)
    if not exported and not force:
        raise OverlayError(_unexported_advice(repo, pin, branch, tip, applied, args, pulled=recorded not in (None, series)))
    kept = keep_ref(repo, branch, tip) if not exported else None  # a ref only where commits would be lost
    _move_branch(repo, branch, tip, new)
    write_state(repo, branch, series, new)
    logger.info(f"{repo}: {branch} at {new} (series {series}, {len(patches)} patch(es))")
    if kept:
        carry = ""
        if applied and applied != tip and _is_ancestor(repo, applied, tip):
            carry = f"; to carry its commits over: git -C {q(repo)} cherry-pick {applied}..{kept}"
        logger.info(f"its previous tip {tip} stays as {kept}{carry}")
    elif tip is not None:
        logger.info(f"its previous tip {tip} was exported (patches/ holds its commits), so no ref is kept for it")
    return repo


def refuse_empty(patches: Sequence[Path], args: Sequence[str] = ()) -> None:
    """Refuse a patch file that is empty (only blank): git am would skip it and the series hash not see it."""
    if empty := [p for p in patches if not p.read_bytes().strip()]:
        listed = "".join(f"\n  {p}" for p in empty)
        raise OverlayError(f"empty patch file(s), which no commit can come from:{listed}\n"
                           f"remove them (or write a patch into them), then run {hint('apply', *args)}")  # fmt: skip


def _is_ancestor(repo: Path, old: str, new: str) -> bool:
    return git(repo, "merge-base", "--is-ancestor", old, new, check=False).returncode == 0


def _unexported_advice(repo: Path, pin: Pin, branch: str, tip: str, applied: str | None, args: list[str], *,
                       pulled: bool) -> str:  # fmt: skip
    """Why apply does not move ``branch``, and the command that goes on (export, or after a pull apply --force)."""
    subjects = git_out(repo, "log", "--reverse", "--format=  %h %s", f"{applied}..{tip}" if applied and
                       _is_ancestor(repo, applied, tip) else f"{pin.tag}..{tip}")  # fmt: skip
    force = (f"run {hint('apply', *args, '--force')}: {branch} moves to the series of patches/ and its old tip stays "
             f"named (a branch or tag already there, else branch kept/{branch}-{tip[:12]}), printed with the "
             "git cherry-pick that carries your commits over; run that, then export")  # fmt: skip
    if pulled:  # export would refuse (it would undo the change to patches/): --force is the way on
        return (f"{repo}: {branch} ({tip}) holds commits that are not in patches/:\n{subjects}\n"
                f"and patches/ changed since they were made (a pull?), so they cannot be exported first\n"
                f"to take both: {force}")  # fmt: skip
    return (f"{repo}: {branch} ({tip}) holds commits that are not in patches/:\n{subjects}\n"
            f"to put them into patches/, run {hint('export', *args)}, then apply again\n"
            f"to apply patches/ anyway: {force}")


def _patch_advice(exc: PatchError, repo: Path, branch: str, args: list[str]) -> str:
    """``exc``'s message, that nothing changed, and what to do next."""
    before = f"the {exc.index - 1} patch(es) before it are commit {exc.applied}; " if exc.index > 1 else ""
    return (
        f"{exc}\nnothing in {repo} changed ({branch} and the work tree are as they were)\n"
        f"next: make {exc.patch} apply on top of the patches before it, then run {hint('apply', *args)}; "
        f"{before}to resolve it in git: git -C {q(repo)} switch -c fix-series {exc.applied} && "
        f"git -C {q(repo)} am -3 {q(exc.patch)}"
    )


def apply_to_clone(clone: Path, rev: str, *, patches_dir: Path | None = None, branch: str = BRANCH, force: bool = False,
                   author: str | None = None) -> str:  # fmt: skip
    """Apply the series onto ``rev`` of a real upstream clone, as branch ``branch``.

    The patches are applied in a temporary detached worktree, so the clone's own checkout is never touched, and the
    branch only moves once every patch applied.  The user's git configuration applies here (it is their clone).
    Without ``author`` the commits keep each patch's author and date (the overlay's identity commits them); with
    ``author`` ("Name <email>") they are authored and committed by that person, dated now: the branch to submit.
    """
    identity = author_identity(author) if author is not None else None
    if not (clone / ".git").exists() and git(clone, "rev-parse", "--git-dir", hermetic=False, check=False).returncode:
        raise OverlayError(f"--upstream {clone}: not a git repository")
    base = git(clone, "rev-parse", "--verify", "-q", f"{rev}^{{commit}}", hermetic=False, check=False).stdout.strip()
    if not base:
        raise OverlayError(f"--rev {rev!r}: no such commit in {clone}")
    patches = patch_files(patches_dir)
    logger.info(f"applying {len(patches)} patch(es) onto {rev} ({base}) of {clone}")
    try:
        head = build_aside(clone, base, patches, hermetic=False, identity=identity)
    except PatchError as exc:
        raise PatchError(
            f"{exc}\nnothing in {clone} changed; to resolve it there by hand: "
            f"git -C {clone} switch -c {branch} {base} && git -C {clone} am -3 {exc.patch.parent}/*.patch, "
            "fix the files it names, git add them, git am --continue",
            exc.patch, exc.index, exc.count, exc.applied,
        ) from None  # fmt: skip
    current = git(clone, "rev-parse", "--verify", "-q", f"refs/heads/{branch}", hermetic=False, check=False).stdout
    current = current.strip()
    if current == head:
        logger.info(f"{clone}: branch {branch} is up to date at {head}")
        return head
    if current and not force:
        again = hint("apply", "--upstream", str(clone), "--rev", rev, "--branch", branch, "--force")
        raise OverlayError(f"{clone}: branch {branch} exists at {current}, not at the series' result {head}; "
                           f"to move it, run {again} (or pick another --branch NAME)")
    kept = keep_ref(clone, branch, current) if current else None  # the old tip stays named, as in the work repo
    git(clone, "branch", "-f", branch, head, hermetic=False)
    if kept:
        logger.info(f"{clone}: moved branch {branch} from {current}; its old tip stays as {kept}")
    logger.info(f"{clone}: branch {branch} at {head} ({len(patches)} patch(es) on {rev})")
    return head


def ensure_applied(pin: Pin, *, workdir: Workdir, patches_dir: Path | None = None, wheelhouse: Path | None = None
                   ) -> Path:  # fmt: skip
    """The work repository, (re)applied first if missing or built from another series.

    A wheel is built from the series branch and the tests run from the work tree, so a repository
    holding the series with commits not exported, uncommitted or untracked files, or HEAD on
    another branch is refused: the wheel would not match what is tested.
    """
    repo, branch, series = work_repo(workdir), series_branch(pin), series_hash(patches_dir)
    args = series_args(pin, patches_dir)
    refuse_empty(patch_files(patches_dir), args)
    if (repo / ".git").is_dir():
        recorded, applied = read_state(repo, branch)
        if recorded == series:
            _refuse_a_mix(repo, branch, applied, args)
            return repo
        logger.info(f"{repo} holds series {recorded or '(none: no apply finished)'}, patches/ is {series}: applying")
    return apply(pin, workdir=workdir, patches_dir=patches_dir, wheelhouse=wheelhouse)


def _refuse_a_mix(repo: Path, branch: str, applied: str | None, args: list[str]) -> None:
    """Refuse, listing every cause at once, where the work tree is not just ``branch``'s commits as applied or
    exported: commits not exported, uncommitted or untracked files, HEAD elsewhere."""
    problems, again = [], f"then run {running()} again"
    if branch_tip(repo, branch) != applied:
        problems.append(f"{repo}: branch {branch} has commits not exported to patches/; "
                        f"run {hint('export', *args)}, {again}, so the wheel matches the series")  # fmt: skip
    if status := git_out(repo, "status", "--porcelain"):
        problems.append(
            f"{repo} has {dirt(status)}, which the patched wheel (built from commits) would not "
            f"hold while the tests ran from that work tree:\n{status}\n"
            f"to keep them in the series, commit them there (git -C {repo} add -A && git -C {repo} commit), "
            f"run {hint('export', *args)}, {again}\n"
            f"to set them aside, git -C {repo} stash push --include-untracked, {again} "
            f"(git -C {repo} stash pop brings them back)"
        )
    if not on_branch(repo, branch):
        problems.append(f"{repo}: HEAD is {head_place(repo)}, but the patched wheel is built from branch {branch}; "
                        f"git -C {repo} switch {branch}, {again}")  # fmt: skip
    if len(problems) > 1:
        problems.insert(0, f"{len(problems)} things stop the build, each with what goes on:")
    if problems:
        raise OverlayError("\n".join(problems))
