"""The work repository's git plumbing: recorded state, what is checked out, the base commit, patch-ids.

The work repository (``<workdir>/upstream/``) is created once and then only added to: the tools
create commits, tags and branches in it and move branch ``decode-gather`` (its old tip kept under a
named ref) in the ways
:func:`freetoken_overlay.series.apply` describes; they never delete it, move it, or delete a ref,
stash entry, file or directory in it (CONTRIBUTING.md, "Nothing is thrown away").  Where git
itself would refuse (an operation in progress, local changes in the way), they refuse too.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
import tempfile
from collections.abc import Mapping
from pathlib import Path

from .pin import BASE_AUTHOR_EMAIL, BASE_AUTHOR_NAME, BASE_DATE, DEFAULT_VERSION, Pin
from .upstream import write_tree
from .util import OVERLAY_EMAIL, OVERLAY_NAME, OverlayError, git, git_out

BRANCH = "decode-gather"

# Build noise that must not count as uncommitted work in the work tree.
WORK_EXCLUDES = ("__pycache__/", "*.pyc", ".pytest_cache/", ".hypothesis/", ".benchmarks/")

#: Operations git leaves in progress, by the file it keeps in the git directory: (what, the git command that
#: continues or aborts it); ``rebase-apply`` is a rebase or a ``git am``, told apart by its ``applying`` file.
_IN_PROGRESS = {"rebase-merge": ("a rebase", "rebase"), "rebase-apply": ("a rebase", "rebase"),
                "MERGE_HEAD": ("a merge", "merge"), "CHERRY_PICK_HEAD": ("a cherry-pick", "cherry-pick"),
                "REVERT_HEAD": ("a revert", "revert")}  # fmt: skip


def q(value: object) -> str:
    return shlex.quote(str(value))


def series_branch(pin: Pin) -> str:
    """The branch the series lives on for ``pin``: ``decode-gather`` (``decode-gather-<v>`` for another release)."""
    return BRANCH if pin.version == DEFAULT_VERSION else f"{BRANCH}-{pin.version}"


def read_state(repo: Path, branch: str = BRANCH) -> tuple[str | None, str | None]:
    """(series hash, branch tip) that apply or export last recorded for ``branch``."""

    def get(key: str) -> str | None:
        return git(repo, "config", "--local", "--get", key, check=False).stdout.strip() or None

    return get(f"overlay.{branch}.seriesHash"), get(f"overlay.{branch}.appliedHead")


def write_state(repo: Path, branch: str, series: str, head: str) -> None:
    git(repo, "config", "--local", f"overlay.{branch}.seriesHash", series)
    git(repo, "config", "--local", f"overlay.{branch}.appliedHead", head)


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _manifest_path(repo: Path, branch: str) -> Path:
    return repo / ".git" / f"overlay-exported-{branch}.json"


def write_manifest(repo: Path, branch: str, files: Mapping[str, bytes]) -> None:
    """Record the patch files export wrote (name -> sha256): the only ones it may replace unasked."""
    manifest = {name: sha256_hex(data) for name, data in sorted(files.items())}
    _manifest_path(repo, branch).write_text(json.dumps(manifest, indent=1) + "\n")


def read_manifest(repo: Path, branch: str) -> dict[str, str]:
    try:
        return json.loads(_manifest_path(repo, branch).read_text())
    except (OSError, ValueError):
        return {}


def branch_tip(repo: Path, branch: str = BRANCH) -> str | None:
    proc = git(repo, "rev-parse", "--verify", "-q", f"refs/heads/{branch}^{{commit}}", check=False)
    return proc.stdout.strip() or None


def head_ref(repo: Path) -> str | None:
    """The ref HEAD points to (``refs/heads/...``); None when detached."""
    return git(repo, "symbolic-ref", "-q", "HEAD", check=False).stdout.strip() or None


def on_branch(repo: Path, branch: str = BRANCH) -> bool:
    return head_ref(repo) == f"refs/heads/{branch}"


def head_place(repo: Path) -> str:
    """Where HEAD is, in words: ``on branch NAME`` or ``detached at SHA``."""
    if (ref := head_ref(repo)) is not None:
        return f"on branch {ref.removeprefix('refs/heads/')}"
    return f"detached at {git(repo, 'rev-parse', '-q', '--verify', 'HEAD', check=False).stdout.strip() or '(none)'}"


def dirt(status: str) -> str:
    """What ``git status --porcelain`` output lists: uncommitted changes, untracked files or both."""
    lines = status.splitlines()
    kinds = ["uncommitted changes"] * any(not x.startswith("??") for x in lines)
    return " and ".join(kinds + ["untracked files"] * any(x.startswith("??") for x in lines))


def refuse_if_busy(repo: Path, doing: str, again: str = "") -> None:
    """Refuse (as git would) while an operation is in progress in ``repo``'s main work tree: one command a line,
    to continue it or to abort it, then ``again`` (how to run this step again)."""
    git_dir = repo / ".git"
    for name, (what, verb) in _IN_PROGRESS.items():
        if (git_dir / name).exists():
            if name == "rebase-apply" and (git_dir / name / "applying").exists():
                what, verb = "a git am", "am"
            raise OverlayError(
                f"{repo} has {what} in progress; {doing} waits until it is finished\n"
                f"to finish it (once what it stopped at is resolved and added):\n  git -C {q(repo)} {verb} --continue\n"
                f"or to give it up (back to where it started):\n  git -C {q(repo)} {verb} --abort\n"
                f"then run this again{': ' + again if again else ''}"
            )


def checked_out_elsewhere(repo: Path, branch: str) -> str | None:
    """The other work tree of ``repo`` that has ``branch`` checked out, if any."""
    out = git_out(repo, "worktree", "list", "--porcelain")
    path = None
    for line in out.splitlines():
        if line.startswith("worktree "):
            path = line.removeprefix("worktree ")
        elif line == f"branch refs/heads/{branch}" and path and Path(path).resolve() != repo.resolve():
            return path
    return None


def patch_ids(repo: Path, base: str, tip: str) -> list[str]:
    """The stable patch-ids of the commits ``base..tip``, oldest first (a commit without a diff has none)."""
    log = git(repo, "log", "--reverse", "-p", "--format=commit %H", f"{base}..{tip}").stdout
    out = git(repo, "patch-id", "--stable", input=log).stdout
    by_commit = {c: p for p, c in (line.split() for line in out.splitlines() if line)}
    commits = git_out(repo, "rev-list", "--reverse", f"{base}..{tip}").split()
    return [by_commit.get(c, "") for c in commits]


def text_patch_id(repo: Path, text: bytes) -> str:
    """The stable patch-id of a patch's text ('' when it has no diff)."""
    return (git(repo, "patch-id", "--stable", input=text.decode(errors="replace")).stdout.split() or [""])[0]


def file_patch_ids(repo: Path, patches: list[Path]) -> list[str]:
    """The stable patch-ids of patch files, in order."""
    return [text_patch_id(repo, p.read_bytes()) for p in patches]


def empty_commits(repo: Path, base: str, tip: str) -> list[str]:
    """Subjects of the commits in ``base..tip`` that change nothing (they would export as empty patches)."""
    out = git_out(repo, "log", "--reverse", "--format=%H %T %P%x00%s", f"{base}..{tip}")
    empty = []
    for line in out.splitlines():
        ids, subject = line.split("\0", 1)
        commit, tree, *parents = ids.split()
        if parents and git_out(repo, "rev-parse", f"{parents[0]}^{{tree}}") == tree:
            empty.append(subject)
    return empty


def named_ref_at(repo: Path, commit: str, besides: str = "") -> str | None:
    """A branch or tag (short name) other than ``besides`` that points at ``commit``, if any."""
    out = git_out(repo, "for-each-ref", "--points-at", commit, "--format=%(refname:short)", "refs/heads", "refs/tags")
    return next((r for r in out.splitlines() if r != besides), None)


def keep_ref(repo: Path, branch: str, commit: str) -> str:
    """A named ref at ``commit`` before ``branch`` moves off it: an existing branch or tag there, else a new
    branch ``kept/<branch>-<sha12>`` (never moved: created only where that name is free)."""
    if (existing := named_ref_at(repo, commit, besides=branch)) is not None:
        return existing
    name = f"kept/{branch}-{commit[:12]}"
    git(repo, "update-ref", "-m", f"overlay: {branch} was here", f"refs/heads/{name}", commit, "")
    return name


def _base_env() -> dict[str, str]:
    """The base commit's author and committer (the same fixed identity and date)."""
    base = {"NAME": BASE_AUTHOR_NAME, "EMAIL": BASE_AUTHOR_EMAIL, "DATE": BASE_DATE}
    return {f"GIT_{role}_{key}": value for role in ("AUTHOR", "COMMITTER") for key, value in base.items()}


def init_repo(repo: Path, branch: str) -> None:
    """``git init`` ``repo`` (an empty or missing directory) with the build-noise excludes."""
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", branch)
    carry_notes(repo)
    exclude = repo / ".git" / "info" / "exclude"
    exclude.parent.mkdir(exist_ok=True)
    exclude.write_text("\n".join(WORK_EXCLUDES) + "\n")


#: Where the series' commits keep their notes (a reviewer's note of a patch: :mod:`freetoken_overlay.notes`).
NOTES_REF = "refs/notes/commits"


def carry_notes(repo: Path) -> None:
    """Let git carry a commit's note (refs/notes/commits: a reviewer's note of its patch) to the commit that
    ``git commit --amend`` or ``git rebase`` makes of it.  Where no note exists yet the ref is made, with no notes:
    ``notes.rewriteRef`` naming a missing ref made every rebase warn twice that it is invalid."""
    git(repo, "config", "--local", "notes.rewriteRef", NOTES_REF)
    tree = git(repo, "mktree", input="").stdout.strip()  # the empty tree, written: git fsck wants its object
    if git(repo, "rev-parse", "-q", "--verify", NOTES_REF, check=False).returncode:
        dated = {"GIT_AUTHOR_NAME": OVERLAY_NAME, "GIT_AUTHOR_EMAIL": OVERLAY_EMAIL, "GIT_AUTHOR_DATE": BASE_DATE,
                 "GIT_COMMITTER_DATE": BASE_DATE}  # fmt: skip
        empty = git(repo, "commit-tree", tree, "-m", "Notes of the series' commits", env=dated).stdout.strip()
        git(repo, "update-ref", NOTES_REF, empty, "")  # made only where it is missing


def kept_refs(repo: Path, base: str, branch: str, known: set[str]) -> dict[str, list[str]]:
    """Each ``kept/<branch>-<sha12>`` branch: the commits (``%h %s``) of ``base..`` it holds whose patch-ids are
    not in ``known`` (the branch's and patches/'): what dropping it would lose (none: safe to drop)."""
    out = git_out(repo, "for-each-ref", "--format=%(refname:short)", f"refs/heads/kept/{branch}-*")
    names = [n for n in out.split() if re.fullmatch(rf"kept/{re.escape(branch)}-[0-9a-f]{{12}}", n)]
    kept = {}
    for name in names:
        commits = git_out(repo, "rev-list", "--reverse", f"{base}..{name}").split()
        ids = patch_ids(repo, base, name)
        kept[name] = [git_out(repo, "log", "-1", "--format=%h %s", c) for c, i in zip(commits, ids) if i not in known]
    return kept


def make_base_commit(repo: Path, pin: Pin, files: Mapping[str, bytes]) -> str:
    """The deterministic base commit of ``files`` in ``repo`` (its work tree and refs untouched); its id.
    Tree and commit ids are asserted against the pin; the caller tags it."""
    with tempfile.TemporaryDirectory(prefix="ft-overlay-base-") as tmp:
        tree_dir = Path(tmp) / "tree"
        write_tree(files, tree_dir)
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        git(repo, "--work-tree", str(tree_dir), "add", "-A", env=env)
        tree = git(repo, "write-tree", env=env).stdout.strip()
        if tree != pin.tree_id:
            raise OverlayError(f"base tree of FreeToken {pin.version}: expected {pin.tree_id}, got {tree}")
        commit = git(repo, "commit-tree", tree, env=_base_env(), input=pin.base_message).stdout.strip()
    if commit != pin.base_commit:
        raise OverlayError(f"base commit of FreeToken {pin.version}: expected {pin.base_commit}, got {commit} "
                           "(has the base commit's identity, date or message changed?)")  # fmt: skip
    return commit


def check_out_new_branch(repo: Path, branch: str, commit: str) -> None:
    """Create ``branch`` at ``commit`` where HEAD points at it unborn (the first apply), writing the missing files
    only (one there is kept: clean if the same). Interrupted, it runs again as is: HEAD is unborn to the end."""
    git(repo, "read-tree", commit)
    git(repo, "checkout-index", "-u", "-z", "--stdin", input=git(repo, "ls-files", "-z", "--deleted").stdout)
    git(repo, "update-index", "-q", "--refresh", check=False)  # the files kept: their stat data, not a change
    git(repo, "update-ref", f"refs/heads/{branch}", commit, "")


def unfinished(repo: Path, branch: str) -> bool:
    """Whether HEAD is on ``branch`` and it has no commit yet ("No commits yet"): the first apply did not finish."""
    return on_branch(repo, branch) and branch_tip(repo, branch) is None
