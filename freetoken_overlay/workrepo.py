"""What a work repository holds beyond what apply or export left there, and saving it first.

``apply`` replaces ``<workdir>/upstream/`` when the series changes; ``export`` rewrites
``patches/``.  Neither may drop anything it did not write itself unless it is saved elsewhere
(CONTRIBUTING.md, "The edit → commit → export loop").  This module finds that work
(:func:`repo_work`: uncommitted and untracked files, unexported commits, HEAD off the series
branch, other branches, tags and refs, every stash entry, commits only a reflog still names),
saves it (:func:`save_repo`: one git bundle of all of it; :func:`save_files`: copies of patch
files) and prints restore commands that run as printed and stop rather than overwrite newer edits.
"""

from __future__ import annotations

import hashlib
import json
import os
import shlex
import shutil
import tempfile
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from .util import OVERLAY_EMAIL, OVERLAY_NAME, OverlayError, git, git_out

BRANCH = "decode-gather"

_STATE_SERIES = "overlay.seriesHash"
_STATE_HEAD = "overlay.appliedHead"
_STATE_TAG = "overlay.baseTag"
#: In the work repository's git directory: name -> sha256 of the patch files apply read or export wrote.
_MANIFEST = "overlay-patches.json"

#: Refs a save adds to the repository it bundles (and removes again once the bundle is written).
SAVED_UNCOMMITTED_REF = "refs/overlay/uncommitted"
_SAVED_STASH_REFS = "refs/overlay/stash"
_SAVED_REFLOG_REFS = "refs/overlay/reflog"

_SAVE_IDENTITY = {"GIT_AUTHOR_NAME": OVERLAY_NAME, "GIT_AUTHOR_EMAIL": OVERLAY_EMAIL}


# --------------------------------------------------------------------------- recorded state


def read_state(repo: Path) -> tuple[str | None, str | None]:
    """(series hash, branch tip) that apply or export recorded in ``repo``'s git config."""

    def get(key: str) -> str | None:
        return git(repo, "config", "--local", "--get", key, check=False).stdout.strip() or None

    return get(_STATE_SERIES), get(_STATE_HEAD)


def recorded_tag(repo: Path) -> str | None:
    return git(repo, "config", "--local", "--get", _STATE_TAG, check=False).stdout.strip() or None


def write_state(repo: Path, series: str, head: str, tag: str) -> None:
    git(repo, "config", "--local", _STATE_SERIES, series)
    git(repo, "config", "--local", _STATE_HEAD, head)
    git(repo, "config", "--local", _STATE_TAG, tag)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_manifest(repo: Path, files: Mapping[str, bytes]) -> None:
    """Record the patch files apply read or export wrote (name -> sha256)."""
    manifest = {name: sha256_hex(data) for name, data in sorted(files.items())}
    (repo / ".git" / _MANIFEST).write_text(json.dumps(manifest, indent=1) + "\n")


def read_manifest(repo: Path) -> dict[str, str] | None:
    try:
        return json.loads((repo / ".git" / _MANIFEST).read_text())
    except (OSError, ValueError):
        return None


# --------------------------------------------------------------------------- what the repository holds


def branch_tip(repo: Path) -> str | None:
    proc = git(repo, "rev-parse", "--verify", "-q", f"refs/heads/{BRANCH}^{{commit}}", check=False)
    return proc.stdout.strip() or None


def head_ref(repo: Path) -> str | None:
    """The ref HEAD points to (``refs/heads/...``); None when detached."""
    return git(repo, "symbolic-ref", "-q", "HEAD", check=False).stdout.strip() or None


def on_series_branch(repo: Path) -> bool:
    """Whether HEAD is the series branch (what build and export work from)."""
    return head_ref(repo) == f"refs/heads/{BRANCH}"


def describe_head(ref: str | None, head: str | None) -> str:
    """Where HEAD is, in words: ``on branch NAME`` or ``detached at SHA``."""
    return f"on branch {ref.removeprefix('refs/heads/')}" if ref is not None else f"detached at {head or '(none)'}"


def head_place(repo: Path) -> str:
    """:func:`describe_head` of ``repo`` (the commit is read only when HEAD is detached)."""
    ref = head_ref(repo)
    head = None if ref else git(repo, "rev-parse", "-q", "--verify", "HEAD", check=False).stdout.strip()
    return describe_head(ref, head)


def dirt(status: str) -> str:
    """What ``git status --porcelain`` output lists: uncommitted changes, untracked files or both."""
    lines = status.splitlines()
    kinds = ["uncommitted changes"] * any(not x.startswith("??") for x in lines)
    return " and ".join(kinds + ["untracked files"] * any(x.startswith("??") for x in lines))


@dataclass(frozen=True)
class RepoWork:
    """What ``repo`` holds beyond the branch and base tag that apply or export left there."""

    repo: Path
    status: str  # ``git status --porcelain`` ('' when clean)
    head_ref: str | None  # what HEAD points to (None: detached)
    head: str | None  # HEAD's commit
    tip: str | None  # the series branch's tip
    applied: str | None  # the tip apply or export recorded
    refs: tuple[str, ...]  # refs besides the series branch, the base tag and refs/stash
    stashes: tuple[tuple[str, str], ...]  # (commit, message) of every stash entry, stash@{0} first
    reflog_only: tuple[str, ...]  # commits that only reflog entries name (no ref reaches them)

    @property
    def unexported(self) -> bool:
        return self.tip is None or self.tip != self.applied

    @property
    def head_elsewhere(self) -> bool:
        return self.head_ref != f"refs/heads/{BRANCH}"

    def reasons(self) -> list[str]:
        """Why replacing the repository would lose work (empty: only reflog entries, or nothing)."""
        repo, found = self.repo, []
        if self.status:
            found.append(f"{repo} has {dirt(self.status)} (export takes commits only):\n{self.status}")
        if self.unexported:
            found.append(
                f"{repo}: branch {BRANCH} ({self.tip}) is not what apply or export left ({self.applied}); "
                "it has commits not exported to patches/"
            )
        if self.head_elsewhere:
            found.append(f"{repo}: HEAD is {describe_head(self.head_ref, self.head)}, not on branch {BRANCH}")
        named = describe_refs(self.refs, len(self.stashes))
        if named:
            found.append(f"{repo} has {named}, which patches/ does not hold")
        return found


def describe_refs(refs: Iterable[str], stashes: int) -> str:
    """``branch my-idea, tag t1, 2 stash entries`` for a list of full ref names."""
    words = []
    for ref in refs:
        for prefix, kind in (("refs/heads/", "branch"), ("refs/tags/", "tag")):
            if ref.startswith(prefix):
                words.append(f"{kind} {ref.removeprefix(prefix)}")
                break
        else:
            words.append(f"ref {ref}")
    if stashes:
        words.append(f"{stashes} stash entr{'y' if stashes == 1 else 'ies'}")
    return ", ".join(words)


def _stash_entries(repo: Path) -> list[tuple[str, str]]:
    if git(repo, "rev-parse", "-q", "--verify", "refs/stash", check=False).returncode:
        return []
    out = git_out(repo, "log", "-g", "--format=%H%x00%gs", "refs/stash")
    return [tuple(line.split("\0", 1)) for line in out.splitlines() if line]  # type: ignore[misc]


def _reflog_only(repo: Path, exclude: Iterable[str] = ()) -> list[str]:
    """Commits reflog entries name that no ref reaches (a rebase's or reset's old commits)."""
    named = git_out(repo, "rev-list", "--no-walk", "--reflog").split()
    unreachable = set(git_out(repo, "rev-list", "--reflog", "--not", "--all").split())
    skip = set(exclude)
    return sorted({c for c in named if c in unreachable and c not in skip})


def repo_work(repo: Path, tag: str) -> RepoWork:
    """What ``repo`` (a git repository) holds beyond what apply or export left: see :class:`RepoWork`."""
    _, applied = read_state(repo)
    own = {f"refs/heads/{BRANCH}", f"refs/tags/{tag}", "refs/stash"}
    refs = tuple(r for r in git_out(repo, "for-each-ref", "--format=%(refname)").splitlines() if r not in own)
    stashes = tuple(_stash_entries(repo))
    return RepoWork(
        repo=repo,
        status=git_out(repo, "status", "--porcelain"),
        head_ref=head_ref(repo),
        head=git(repo, "rev-parse", "-q", "--verify", "HEAD", check=False).stdout.strip() or None,
        tip=branch_tip(repo),
        applied=applied,
        refs=refs,
        stashes=stashes,
        reflog_only=tuple(_reflog_only(repo, exclude=(c for c, _ in stashes))),
    )


# --------------------------------------------------------------------------- saving


def _unique(saved: Path, stem: str, suffix: str = "") -> Path:
    """``<saved>/<stem>.<UTC time><suffix>``, with ``-2``, ``-3``, ... where that exists."""
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    for n in range(1, 1000):
        target = saved / f"{stem}.{stamp}{'' if n == 1 else f'-{n}'}{suffix}"
        if not target.exists():
            return target
    raise OverlayError(f"{saved}: too many saves named {stem}.{stamp}*")


def stash_like_commit(repo: Path, message: str) -> str:
    """A commit shaped like ``git stash push --include-untracked`` makes (HEAD, index, untracked
    files as parents), without touching the work tree; ``git stash apply --index`` restores it."""
    head = git_out(repo, "rev-parse", "HEAD")
    index_tree = git(repo, "write-tree", check=False)
    if index_tree.returncode:
        raise OverlayError(f"{repo} has unmerged files (a merge, rebase or am in progress): finish or abort it there")
    index_tree_id = index_tree.stdout.strip()
    index = git(repo, "commit-tree", index_tree_id, "-p", head, "-m", f"index of {message}", env=_SAVE_IDENTITY)
    index = index.stdout.strip()
    parents = ["-p", head, "-p", index]
    untracked = git(repo, "ls-files", "-z", "--others", "--exclude-standard").stdout
    with tempfile.TemporaryDirectory(prefix="ft-overlay-save-") as tmp:
        if untracked:
            env = {**_SAVE_IDENTITY, "GIT_INDEX_FILE": str(Path(tmp) / "untracked")}
            git(repo, "read-tree", "--empty", env=env)
            git(repo, "update-index", "--add", "-z", "--stdin", env=env, input=untracked)
            tree = git(repo, "write-tree", env=env).stdout.strip()
            untracked_commit = git(repo, "commit-tree", tree, "-m", f"untracked files of {message}", env=env)
            parents += ["-p", untracked_commit.stdout.strip()]
        env = {**_SAVE_IDENTITY, "GIT_INDEX_FILE": str(Path(tmp) / "worktree")}
        git(repo, "read-tree", index_tree_id, env=env)
        git(repo, "add", "-u", env=env)
        tree = git(repo, "write-tree", env=env).stdout.strip()
        return git(repo, "commit-tree", tree, *parents, "-m", message, env=env).stdout.strip()


def _q(value: object) -> str:
    return shlex.quote(str(value))


def save_repo(repo: Path, saved: Path, *, tag: str, everything: bool = True, work: RepoWork | None = None) -> str:
    """Save what replacing ``repo`` would lose into ``saved/``; a message with the restore commands.

    A git repository becomes one bundle of all its refs, plus every stash entry
    (``refs/overlay/stash/N``), the commits only its reflogs name (``refs/overlay/reflog/SHA``) and
    its uncommitted and untracked files as a stash-shaped commit (:data:`SAVED_UNCOMMITTED_REF`).
    The restore commands fetch it all under ``refs/saved/<save name>/`` (a namespace per save, so
    restoring a second save does not collide with the first), then with ``everything``
    recreate the branches, tags and stash entries, move HEAD back and re-apply the uncommitted files;
    ``git checkout`` and ``git stash apply`` stop rather than overwrite edits made since.
    Anything else (not a git repository) is moved there as it is. ``work``: the caller's
    :func:`repo_work` of ``repo``, when it has one (not read again).
    """
    saved.mkdir(parents=True, exist_ok=True)
    if not (repo / ".git").is_dir():
        target = _unique(saved, repo.name)
        os.replace(repo, target)
        return f"moved {repo} to {target} (to restore it: mv {_q(target)} {_q(repo)})"
    if work is None:
        work = repo_work(repo, tag)
    bundle = _unique(saved, repo.name, ".bundle")
    name = bundle.name.removesuffix(".bundle")
    ns = f"refs/saved/{name}"
    added = []
    for n, (commit, _) in enumerate(work.stashes):
        added.append((f"{_SAVED_STASH_REFS}/{n}", commit))
    for commit in work.reflog_only:
        added.append((f"{_SAVED_REFLOG_REFS}/{commit}", commit))
    if work.status:
        added.append((SAVED_UNCOMMITTED_REF, stash_like_commit(repo, "apply: the uncommitted and untracked files")))
    for ref, commit in added:
        git(repo, "update-ref", ref, commit)
    try:
        git(repo, "bundle", "create", "-q", str(bundle), "--all")
    finally:
        for ref, _ in added:
            git(repo, "update-ref", "-d", ref, check=False)

    r = _q(repo)

    def saved_ref(ref: str) -> str:  # where the restore's fetch puts one of the refs added above
        return f"{ns}/{ref.removeprefix('refs/')}"

    steps = [(f"git -C {r} fetch -q --no-tags {_q(bundle)} {_q(f'+refs/*:{ns}/*')}", f"all of it, as {ns}/...")]
    if everything:
        if work.tip is not None:
            steps.append((
                f"git -C {r} checkout -B {BRANCH} {ns}/heads/{BRANCH}",
                f"branch {BRANCH} as it was; stops rather than overwrite uncommitted edits, and commits made "
                f"on {BRANCH} since stay in git reflog {BRANCH}",
            ))  # fmt: skip
        for ref in work.refs:
            if ref.startswith("refs/heads/"):
                steps.append((f"git -C {r} branch {_q(ref[11:])} {ns}/heads/{ref[11:]}", "refuses if it exists"))
            elif ref.startswith("refs/tags/"):
                steps.append((f"git -C {r} tag {_q(ref[10:])} {ns}/tags/{ref[10:]}", "refuses if it exists"))
            else:
                steps.append((f"git -C {r} update-ref {_q(ref)} {ns}/{ref[5:]} ''", "refuses if it exists"))
        for n in reversed(range(len(work.stashes))):
            store = f"git -C {r} stash store -m {_q(work.stashes[n][1])} {saved_ref(_SAVED_STASH_REFS)}/{n}"
            steps.append((store, f"stash@{{{n}}}"))
        if work.head_elsewhere:
            back = f"switch {_q(work.head_ref[11:])}" if work.head_ref else f"switch --detach {work.head}"
            steps.append((f"git -C {r} {back}", "HEAD where it was"))
        if work.status:
            steps.append((
                f"git -C {r} stash apply --index {saved_ref(SAVED_UNCOMMITTED_REF)}",
                "the uncommitted and untracked files; stops rather than overwrite edits made since",
            ))  # fmt: skip
    if work.reflog_only:
        steps.append((
            f"git -C {r} log --oneline --no-walk {_q(f'--glob={saved_ref(_SAVED_REFLOG_REFS)}/*')}",
            f"the {len(work.reflog_only)} commit(s) only the reflog held",
        ))  # fmt: skip
    what = f"the work of {repo}"
    if not everything:
        what = f"the {len(work.reflog_only)} commit(s) that only the reflog of {repo} held"
    lines = "".join(f"\n  {cmd}   ({note})" for cmd, note in steps)
    return (
        f"saved {what} to {bundle} (export deletes it once every commit in it is in the exported "
        f"{BRANCH}); to restore it, run in order:{lines}"
    )


def save_files(files: Iterable[Path], saved: Path, stem: str) -> str:
    """Copy ``files`` into a new ``saved/<stem>.<time>/``; a message with the ``cp`` commands that restore them."""
    files = list(files)
    target = _unique(saved, stem)
    target.mkdir(parents=True)
    for path in files:
        shutil.copy2(path, target / path.name)
    lines = "".join(f"\n  cp -p {_q(target / p.name)} {_q(p.parent)}/" for p in files)
    return f"saved {len(files)} file(s) to {target}/ first; to restore them:{lines}"


def bundle_heads(repo: Path, bundle: Path) -> list[str]:
    """The object ids a bundle's refs point at."""
    return [line.split()[0] for line in git_out(repo, "bundle", "list-heads", str(bundle)).splitlines() if line]


def all_reachable(repo: Path, commits: Iterable[str], head: str) -> bool:
    """Whether every one of ``commits`` (and so all they reach) is in ``repo`` and an ancestor of ``head``."""
    for commit in commits:
        if git(repo, "rev-parse", "-q", "--verify", f"{commit}^{{commit}}", check=False).returncode:
            return False
        if git(repo, "merge-base", "--is-ancestor", commit, head, check=False).returncode:
            return False
    return True
