"""The patch series: its hash, ``apply`` (patches/ -> git) and ``export`` (git -> patches/).

The work repository (``<workdir>/upstream/``) has one deterministic base
commit, tagged ``upstream-<version>``, and the series applied on top of it
with ``git am`` on branch ``decode-gather``.  Because the base commit, the
committer identity and the committer dates (``--committer-date-is-author-date``)
are all fixed, the same series always gives the same commit ids, and
``export`` after ``apply`` gives back ``patches/`` byte for byte.

The repository records what it was built from in its git config:
``overlay.seriesHash`` (the series applied) and ``overlay.appliedHead`` (the
branch tip that series gave, or that ``export`` wrote).  ``apply`` refuses to
throw away a work tree with uncommitted changes, untracked files or commits not
yet exported; with ``force`` it saves them to a git bundle in
``<workdir>/saved/`` first, kept until the next export.

Just over 500 lines: apply, export, the work-repository state and the clone submission share the
same git plumbing and error messages.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .pin import BASE_AUTHOR_EMAIL, BASE_AUTHOR_NAME, BASE_DATE, DEFAULT_VERSION, Pin
from .upstream import load_source_tree, write_tree
from .util import OVERLAY_EMAIL, OVERLAY_NAME, REPO_ROOT, OverlayError, Workdir, git, git_out, hint, log

BRANCH = "decode-gather"
PATCHES_DIR = REPO_ROOT / "patches"
SERIES_HASH_LENGTH = 12

#: ``git format-patch`` flags that make the output a pure function of the commits:
#: no commit ids (--zero-commit), no git version (--no-signature), no
#: abbreviation-dependent index lines (--full-index), always ``[PATCH n/m]``
#: subjects.  The diffstat stays (reviewers read it); format-patch draws it at a
#: fixed width whatever the terminal or $COLUMNS.  The work repository is used
#: with the user's and system git configuration hidden, so format.* / diff.*
#: settings cannot leak in.
FORMAT_PATCH_FLAGS = (
    "--zero-commit",
    "--no-signature",
    "--full-index",
    "--numbered",
    "--subject-prefix=PATCH",
    "--no-cover-letter",
    "--no-thread",
)

# Build noise that must not count as uncommitted work in the work tree.
_WORK_EXCLUDES = ("__pycache__/", "*.pyc", ".pytest_cache/", ".hypothesis/", ".benchmarks/")

_STATE_SERIES = "overlay.seriesHash"
_STATE_HEAD = "overlay.appliedHead"

#: In a saved bundle: the commit holding the work tree's uncommitted and untracked files.
SAVED_UNCOMMITTED_REF = "refs/overlay/uncommitted"

# git am's own advice (``Patch failed at 0001``, ``git am --continue``, hints) is about
# its one-patch run in a temporary repository, not about what to do here.
_AM_NOISE = re.compile(r"^(Applying: |Patch failed at |hint: |When you have resolved |If you prefer to skip "
                       r"|To restore the original branch |The copy of the patch )")  # fmt: skip


class PatchError(OverlayError):
    """A patch of the series does not apply: ``patch`` (the file), ``index`` (1-based) of ``count``."""

    def __init__(self, message: str, patch: Path, index: int, count: int) -> None:
        super().__init__(message)
        self.patch, self.index, self.count = patch, index, count


def work_repo(workdir: Workdir, version: str = DEFAULT_VERSION) -> Path:
    """The work repository: ``<workdir>/upstream`` (``upstream-<version>`` for a
    pinned release other than the default one)."""
    return workdir.root / ("upstream" if version == DEFAULT_VERSION else f"upstream-{version}")


def patch_files(patches_dir: Path | None = None) -> list[Path]:
    """The series, in order: ``patches/*.patch`` sorted by name."""
    return sorted((patches_dir or PATCHES_DIR).glob("*.patch"))


def series_hash(patches_dir: Path | str | None = None) -> str:
    """Short sha256 over the patch files' bytes, in order (12 hex digits).

    Patched wheels are versioned ``<version>+dg.<series hash>``; reports and
    results record it to say which series they measured.
    """
    digest = hashlib.sha256()
    for patch in patch_files(Path(patches_dir) if patches_dir is not None else None):
        digest.update(patch.read_bytes())
    return digest.hexdigest()[:SERIES_HASH_LENGTH]


# --------------------------------------------------------------------------- apply


def _failed_files(output: str) -> list[str]:
    """The files ``git am``/``git apply`` names in its error lines, in order."""
    patterns = (
        r"^error: patch failed: (.+):\d+$",
        (
            r"^error: (.+?): (?:patch does not apply|does not exist in index|already exists in index"
            r"|already exists in working directory|does not match index|No such file or directory)$"
        ),
    )
    found: list[str] = []
    for line in output.splitlines():
        for pattern in patterns:
            match = re.match(pattern, line.strip())
            if match and match.group(1) not in found:
                found.append(match.group(1))
    return found


def am_series(
    repo: Path, patches: Sequence[Path], *, hermetic: bool = True, identity: Mapping[str, str] | None = None
) -> str:
    """``git am`` each patch onto the checked-out branch of ``repo``; the new tip.

    One ``git am`` per patch, so a failure names the patch file directly. With ``identity``
    (``GIT_AUTHOR_*``/``GIT_COMMITTER_*`` variables) each commit is re-authored to it, dated now:
    a submission branch carries a real, accountable author, while ``patches/`` keeps its fixed one.
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
                patch, index, len(patches),
            )  # fmt: skip
        if identity:
            git(repo, "commit", "-q", "--amend", "--no-edit", "--reset-author", hermetic=hermetic, env=identity)
        log(f"[{index}/{len(patches)}] {patch.name}: {output.splitlines()[0] if output else 'applied'}")
    return git_out(repo, "rev-parse", "HEAD", hermetic=hermetic)


_AUTHOR = re.compile(r"^(?P<name>[^<>]*\S)\s*<(?P<email>[^<>\s]+@[^<>\s]+)>$")


def author_identity(author: str) -> dict[str, str]:
    """``GIT_AUTHOR_*`` and ``GIT_COMMITTER_*`` for ``"Name <email>"``; OverlayError naming the value otherwise."""
    match = _AUTHOR.match(author.strip())
    if not match:
        raise OverlayError(f"--author {author!r}: expected 'Name <email>', e.g. --author 'Ada Lovelace <ada@example.org>'")
    name, email = match["name"], match["email"]
    return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": email, "GIT_COMMITTER_NAME": name, "GIT_COMMITTER_EMAIL": email}


def _base_env() -> dict[str, str]:
    return {
        "GIT_AUTHOR_NAME": BASE_AUTHOR_NAME,
        "GIT_AUTHOR_EMAIL": BASE_AUTHOR_EMAIL,
        "GIT_AUTHOR_DATE": BASE_DATE,
        "GIT_COMMITTER_NAME": BASE_AUTHOR_NAME,
        "GIT_COMMITTER_EMAIL": BASE_AUTHOR_EMAIL,
        "GIT_COMMITTER_DATE": BASE_DATE,
    }


def make_base_repo(pin: Pin, files: dict[str, bytes], repo: Path) -> str:
    """Create ``repo`` with the deterministic base commit of ``files``; its id.

    The commit is tagged ``upstream-<version>`` and checked out on branch
    ``decode-gather``; tree and commit ids are asserted against the pin.
    """
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", "-b", BRANCH)
    write_tree(files, repo)
    (repo / ".git" / "info").mkdir(exist_ok=True)
    (repo / ".git" / "info" / "exclude").write_text("\n".join(_WORK_EXCLUDES) + "\n")
    git(repo, "add", "-A")
    tree = git_out(repo, "write-tree")
    if tree != pin.tree_id:
        raise OverlayError(f"base tree of FreeToken {pin.version}: expected {pin.tree_id}, got {tree}")
    message = repo / ".git" / "BASE_MESSAGE"
    message.write_text(pin.base_message)
    commit = git(repo, "commit-tree", tree, "-F", str(message), env=_base_env()).stdout.strip()
    message.unlink()
    if commit != pin.base_commit:
        raise OverlayError(
            f"base commit of FreeToken {pin.version}: expected {pin.base_commit}, got {commit} "
            "(has the base commit's identity, date or message changed?)"
        )
    git(repo, "update-ref", f"refs/heads/{BRANCH}", commit)
    git(repo, "tag", pin.tag, commit)
    return commit


def _read_state(repo: Path) -> tuple[str | None, str | None]:
    def get(key: str) -> str | None:
        proc = git(repo, "config", "--local", "--get", key, check=False)
        return proc.stdout.strip() or None

    return get(_STATE_SERIES), get(_STATE_HEAD)


def _write_state(repo: Path, series: str, head: str) -> None:
    git(repo, "config", "--local", _STATE_SERIES, series)
    git(repo, "config", "--local", _STATE_HEAD, head)


def _branch_tip(repo: Path) -> str | None:
    proc = git(repo, "rev-parse", "--verify", "-q", f"refs/heads/{BRANCH}^{{commit}}", check=False)
    return proc.stdout.strip() or None


def _series_args(pin: Pin, patches_dir: Path | None) -> list[str]:
    """The CLI options that select this release and series, for advice."""
    args = [] if pin.version == DEFAULT_VERSION else ["--release", pin.version]
    if patches_dir is not None and Path(patches_dir).resolve() != PATCHES_DIR.resolve():
        args += ["--patches", str(patches_dir)]
    return args


def unexported_work(repo: Path) -> tuple[str, str] | None:
    """What replacing ``repo`` would lose: (kind, description), kind one of ``not-git``,
    ``uncommitted`` (changes or untracked files) and ``unexported`` (commits); None when nothing."""
    if not (repo / ".git").is_dir():
        return "not-git", f"{repo} exists but is not a git repository"
    status = git_out(repo, "status", "--porcelain")
    if status:
        return "uncommitted", f"{repo} has {_dirt(status)} (export takes commits only):\n{status}"
    _, applied = _read_state(repo)
    tip = _branch_tip(repo)
    if applied is None or tip != applied:
        return "unexported", (
            f"{repo}: branch {BRANCH} ({tip}) is not what apply or export left ({applied}); "
            "it has commits not exported to patches/"
        )
    return None


def _dirt(status: str) -> str:
    """What ``git status --porcelain`` output lists: uncommitted changes, untracked files or both."""
    lines = status.splitlines()
    kinds = ["uncommitted changes"] * any(not x.startswith("??") for x in lines)
    return " and ".join(kinds + ["untracked files"] * any(x.startswith("??") for x in lines))


def _refusal(repo: Path, saved: Path, kind: str, reason: str, args: list[str]) -> str:
    """``reason`` and the steps that keep the work, or discard it."""
    export = hint("export", *args)
    if kind == "uncommitted":
        keep = f"to keep it, commit it there (git -C {repo} add -A && git -C {repo} commit), then run {export}"
    elif kind == "unexported":
        keep = f"to keep them, run {export}"
    else:
        keep = f"to keep it, move {repo} elsewhere"
    them = "them" if kind == "unexported" else "it"
    discard = f"to discard {them}, run {hint('apply', *args, '--force')} (saved in {saved}/ first)"
    return f"{reason}\n{keep}\n{discard}"


def save_work(repo: Path, workdir: Workdir) -> str:
    """Save what replacing ``repo`` would lose into ``<workdir>/saved/``; how to get it back.

    A git repository becomes a bundle of all its refs, its uncommitted and
    untracked files as one more commit (:data:`SAVED_UNCOMMITTED_REF`); anything
    else is moved there as it is.  ``export`` removes the saves of its repository.
    """
    workdir.saved.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    target = workdir.saved / f"{repo.name}.{stamp}"
    for n in range(2, 1000):
        if not target.with_name(f"{target.name}.bundle").exists() and not target.exists():
            break
        target = workdir.saved / f"{repo.name}.{stamp}-{n}"
    if not (repo / ".git").is_dir():
        os.replace(repo, target)
        return f"moved {repo} to {target}"
    bundle = target.with_name(f"{target.name}.bundle")
    restore = [f"git -C {repo} fetch {bundle} 'refs/*:refs/saved/*'"]
    if git_out(repo, "status", "--porcelain"):
        index = repo / ".git" / "overlay-save-index"
        env = {"GIT_INDEX_FILE": str(index), "GIT_AUTHOR_NAME": OVERLAY_NAME, "GIT_AUTHOR_EMAIL": OVERLAY_EMAIL}
        git(repo, "read-tree", "HEAD", env=env)
        git(repo, "add", "-A", env=env)
        tree = git(repo, "write-tree", env=env).stdout.strip()
        message = "apply --force: the uncommitted and untracked files"
        commit = git(repo, "commit-tree", tree, "-p", "HEAD", "-m", message, env=env).stdout.strip()
        index.unlink()
        git(repo, "update-ref", SAVED_UNCOMMITTED_REF, commit)
        restore.append(f"git -C {repo} checkout saved/overlay/uncommitted -- .   (the uncommitted files)")
    git(repo, "bundle", "create", "-q", str(bundle), "--all")
    restore.insert(1, f"git -C {repo} reset --hard saved/heads/{BRANCH}   (the branch as it was)")
    steps = "".join(f"\n  {step}" for step in restore)
    return f"saved the work of {repo} to {bundle} (kept until the next export); to restore it:{steps}"


def _up_to_date(repo: Path, series: str) -> str | None:
    """The branch tip when ``repo`` holds ``series`` as applied or exported, nothing more."""
    if not repo.exists() or unexported_work(repo) is not None:
        return None
    recorded, applied = _read_state(repo)
    return applied if recorded == series else None


def _replace_dir(dest: Path, new: Path) -> None:
    """Swap ``new`` into place of ``dest`` (two renames; the old copy is removed last)."""
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.replace(dest, old)
    os.replace(new, dest)
    if old is not None:
        shutil.rmtree(old)


def apply(
    pin: Pin,
    *,
    workdir: Workdir,
    patches_dir: Path | None = None,
    wheelhouse: Path | None = None,
    force: bool = False,
) -> Path:
    """Build the work repository for ``pin`` and apply the series; its path.

    A work repository that already holds the series (applied, or exported and
    clean) is left as it is.  Work it holds that patches/ does not (uncommitted
    changes, untracked files, unexported commits) stops ``apply``; with
    ``force`` it is saved (:func:`save_work`) and replaced.  The new repository
    is built in a temporary directory first: a patch that does not apply
    leaves the previous one as it was (the failed attempt is kept at
    ``<workdir>/failed-apply/`` for inspection).
    """
    patches = patch_files(patches_dir)
    series = series_hash(patches_dir)
    dest = work_repo(workdir, pin.version)
    args = _series_args(pin, patches_dir)
    head = _up_to_date(dest, series)
    if head is not None:
        log(f"{dest} is up to date: {BRANCH} at {head} (series {series}); nothing to do")
        return dest
    risk = unexported_work(dest) if dest.exists() else None
    if risk is not None and not force:
        raise OverlayError(_refusal(dest, workdir.saved, *risk, args))
    files = load_source_tree(pin, cache=workdir.wheels, wheelhouse=wheelhouse)

    workdir.root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=workdir.root, prefix=".apply-"))
    try:
        make_base_repo(pin, files, tmp)
        log(f"base commit {pin.base_commit} tagged {pin.tag}; applying {len(patches)} patch(es)")
        head = am_series(tmp, patches)
        _write_state(tmp, series, head)
    except PatchError as exc:
        shutil.rmtree(workdir.failed_apply, ignore_errors=True)
        os.replace(tmp, workdir.failed_apply)
        raise PatchError(_patch_advice(exc, dest, workdir, args), exc.patch, exc.index, exc.count) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    if risk is not None:
        log(save_work(dest, workdir))
    _replace_dir(dest, tmp)
    shutil.rmtree(workdir.failed_apply, ignore_errors=True)
    log(f"{dest}: {BRANCH} at {head} (series {series}, {len(patches)} patch(es))")
    return dest


def _patch_advice(exc: PatchError, dest: Path, workdir: Workdir, args: list[str]) -> str:
    """``exc``'s message, what was kept and what to do next."""
    failed = workdir.failed_apply
    kept = f"{dest} is unchanged" if dest.exists() else f"nothing was written to {dest}"
    before = f"patches 1-{exc.index - 1} applied, " if exc.index > 1 else ""
    inspect = (
        f"{kept}; the attempt is kept in {failed} ({before}{exc.patch.name} stopped; "
        f"git -C {failed} am --show-current-patch=diff shows it)"
    )
    how = "edit it"
    if dest.exists():
        how += (
            f", or make it as commits in {dest} (it holds the last series that applied) and run {hint('export', *args)}"
        )
    step = f"next: make {exc.patch} apply on top of the patches before it ({how}), then run {hint('apply', *args)}"
    return f"{exc}\n{inspect}\n{step}"


def apply_to_clone(
    clone: Path,
    rev: str,
    *,
    patches_dir: Path | None = None,
    branch: str = BRANCH,
    force: bool = False,
    author: str | None = None,
) -> str:
    """Apply the series onto ``rev`` of a real upstream clone, as branch ``branch``.

    The patches are applied in a temporary detached worktree, so the clone's
    own checkout is never touched, and the branch only moves once every patch
    applied.  The user's git configuration applies here (it is their clone).
    Without ``author`` the commits keep the patches' fixed author and dates
    (the overlay's identity commits them); with ``author`` ("Name <email>")
    they are authored and committed by that person, dated now: the branch to
    submit.
    """
    identity = author_identity(author) if author is not None else None
    if not (clone / ".git").exists() and git(clone, "rev-parse", "--git-dir", hermetic=False, check=False).returncode:
        raise OverlayError(f"--upstream {clone}: not a git repository")
    base = git(clone, "rev-parse", "--verify", "-q", f"{rev}^{{commit}}", hermetic=False, check=False).stdout.strip()
    if not base:
        raise OverlayError(f"--rev {rev!r}: no such commit in {clone}")
    patches = patch_files(patches_dir)
    with tempfile.TemporaryDirectory(prefix="ft-overlay-am-") as tmp:
        worktree = Path(tmp) / "worktree"
        git(clone, "worktree", "add", "--detach", str(worktree), base, hermetic=False)
        try:
            log(f"applying {len(patches)} patch(es) onto {rev} ({base}) of {clone}")
            head = am_series(worktree, patches, hermetic=False, identity=identity)
        except PatchError as exc:
            raise PatchError(
                f"{exc}\nnothing in {clone} changed; to resolve it there by hand: "
                f"git -C {clone} switch -c {branch} {base} && git -C {clone} am -3 {exc.patch.parent}/*.patch, "
                "fix the files it names, git add them, git am --continue",
                exc.patch,
                exc.index,
                exc.count,
            ) from None
        finally:
            git(clone, "worktree", "remove", "--force", str(worktree), hermetic=False, check=False)
            git(clone, "worktree", "prune", hermetic=False, check=False)
    current = git(
        clone, "rev-parse", "--verify", "-q", f"refs/heads/{branch}", hermetic=False, check=False
    ).stdout.strip()
    if current == head:
        log(f"{clone}: branch {branch} is up to date at {head}")
        return head
    if current and not force:
        raise OverlayError(
            f"{clone}: branch {branch} exists at {current}, not at the series' result {head}; "
            f"to move it, run {hint('apply', '--upstream', str(clone), '--rev', rev, '--branch', branch, '--force')} "
            "(or pick another --branch NAME)"
        )
    git(clone, "branch", "-f", branch, head, hermetic=False)
    if current:
        log(f"{clone}: moved branch {branch} from {current} (git -C {clone} branch -f {branch} {current} restores it)")
    log(f"{clone}: branch {branch} at {head} ({len(patches)} patch(es) on {rev})")
    return head


def ensure_applied(
    pin: Pin, *, workdir: Workdir, patches_dir: Path | None = None, wheelhouse: Path | None = None
) -> Path:
    """The work repository, (re)applied first if missing or built from another series."""
    dest = work_repo(workdir, pin.version)
    if (dest / ".git").is_dir():
        recorded, applied = _read_state(dest)
        if recorded == series_hash(patches_dir):
            if _branch_tip(dest) != applied:
                raise OverlayError(
                    f"{dest}: branch {BRANCH} has commits not exported to patches/; "
                    f"run {hint('export', *_series_args(pin, patches_dir))}, then build again, "
                    "so the wheel matches the series"
                )
            return dest
        log(f"{dest} holds series {recorded}, patches/ is {series_hash(patches_dir)}: applying")
    return apply(pin, workdir=workdir, patches_dir=patches_dir, wheelhouse=wheelhouse)


# --------------------------------------------------------------------------- export


def export(pin: Pin, *, workdir: Workdir, patches_dir: Path | None = None) -> list[Path]:
    """Regenerate ``patches/*.patch`` from ``upstream-<version>..decode-gather``.

    Stale patch files are removed; files whose bytes did not change are left
    untouched; other files in patches/ are kept.
    """
    patches_dir = patches_dir or PATCHES_DIR
    repo = work_repo(workdir, pin.version)
    if not (repo / ".git").is_dir():
        raise OverlayError(f"{repo} does not exist: run apply first")
    status = git_out(repo, "status", "--porcelain")
    if status:
        log(
            f"warning: {_dirt(status)} in {repo} are not exported "
            f"(commit them there first: git -C {repo} add -A && git -C {repo} commit):\n{status}"
        )
    head = git_out(repo, "rev-parse", f"refs/heads/{BRANCH}")
    patches_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir.root, prefix=".export-") as tmp:
        git(repo, "format-patch", *FORMAT_PATCH_FLAGS, "-o", tmp, f"{pin.tag}..{head}")
        new = {p.name: p.read_bytes() for p in Path(tmp).glob("*.patch")}
    for stale in patch_files(patches_dir):
        if stale.name not in new:
            stale.unlink()
            log(f"removed stale {stale.relative_to(patches_dir.parent)}")
    for name, data in sorted(new.items()):
        target = patches_dir / name
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)
            log(f"wrote {target.relative_to(patches_dir.parent)}")
    series = series_hash(patches_dir)
    _write_state(repo, series, head)
    log(f"exported {len(new)} patch(es) from {pin.tag}..{BRANCH} ({head}); series {series}")
    for saved in sorted(workdir.saved.glob(f"{repo.name}.*")):
        if saved.is_dir():
            shutil.rmtree(saved)
        else:
            saved.unlink()
        log(f"removed {saved} (work apply --force saved; exported since)")
    return patch_files(patches_dir)
