"""The patch series: its hash, ``apply`` (patches/ -> git) and ``export`` (git -> patches/).

The work repository (``<workdir>/upstream/``) has one deterministic base
commit, tagged ``upstream-<version>``, and the series applied on top of it
with ``git am`` on branch ``decode-gather``.  Because the base commit, the
committer identity and the committer dates (``--committer-date-is-author-date``)
are all fixed, the same series always gives the same commit ids, and
``export`` after ``apply`` gives back ``patches/`` byte for byte.

The repository records what it was built from in its git config:
``overlay.seriesHash`` (the series applied) and ``overlay.appliedHead`` (the
branch tip that series gave).  ``apply`` refuses to throw away a work tree
with uncommitted changes or with commits not yet exported (unless ``force``).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Sequence
from pathlib import Path

from .pin import BASE_AUTHOR_EMAIL, BASE_AUTHOR_NAME, BASE_DATE, DEFAULT_VERSION, Pin
from .upstream import load_source_tree, write_tree
from .util import REPO_ROOT, OverlayError, Workdir, git, git_out, log

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


class PatchError(OverlayError):
    """A patch of the series does not apply."""


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


def am_series(repo: Path, patches: Sequence[Path], *, hermetic: bool = True) -> str:
    """``git am`` each patch onto the checked-out branch of ``repo``; the new tip.

    One ``git am`` per patch, so a failure names the patch file directly.
    """
    for index, patch in enumerate(patches, 1):
        proc = git(
            repo, "am", "--committer-date-is-author-date", "--no-3way", str(patch),
            hermetic=hermetic, check=False,
        )  # fmt: skip
        output = "\n".join(s.strip() for s in (proc.stdout, proc.stderr) if s.strip())
        if proc.returncode != 0:
            files = _failed_files(output)
            where = f" at {', '.join(files)}" if files else ""
            raise PatchError(f"patch {patch.name} does not apply{where}\n{output}")
        log(f"[{index}/{len(patches)}] {patch.name}: {output.splitlines()[0] if output else 'applied'}")
    return git_out(repo, "rev-parse", "HEAD", hermetic=hermetic)


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


def unexported_work(repo: Path) -> str | None:
    """Why replacing ``repo`` would lose work (None when it would not)."""
    if not (repo / ".git").is_dir():
        return f"{repo} exists but is not a git repository"
    status = git_out(repo, "status", "--porcelain")
    if status:
        return f"{repo} has uncommitted changes:\n{status}"
    _, applied = _read_state(repo)
    tip = _branch_tip(repo)
    if applied is None or tip != applied:
        return (
            f"{repo}: branch {BRANCH} ({tip}) is not what apply made ({applied}); "
            "it has commits not exported to patches/"
        )
    return None


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

    Everything is built in a temporary directory first: a patch that does not
    apply leaves the previous work repository as it was (the failed attempt is
    kept at ``<workdir>/failed-apply/`` for inspection).
    """
    patches = patch_files(patches_dir)
    series = series_hash(patches_dir)
    dest = work_repo(workdir, pin.version)
    files = load_source_tree(pin, cache=workdir.wheels, wheelhouse=wheelhouse)

    workdir.root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=workdir.root, prefix=".apply-"))
    try:
        make_base_repo(pin, files, tmp)
        log(f"base commit {pin.base_commit} tagged {pin.tag}; applying {len(patches)} patch(es)")
        head = am_series(tmp, patches)
        _write_state(tmp, series, head)
    except PatchError:
        shutil.rmtree(workdir.failed_apply, ignore_errors=True)
        os.replace(tmp, workdir.failed_apply)
        log(f"the failed attempt is kept at {workdir.failed_apply}; {dest} is unchanged")
        raise
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    if dest.exists():
        reason = unexported_work(dest)
        if reason is None and _branch_tip(dest) == head and _read_state(dest)[0] == series:
            shutil.rmtree(tmp)
            log(f"{dest} is up to date: {BRANCH} at {head} (series {series})")
            return dest
        if reason is not None and not force:
            shutil.rmtree(tmp)
            raise OverlayError(f"{reason}\nrun export first, or apply --force to discard it")
    _replace_dir(dest, tmp)
    shutil.rmtree(workdir.failed_apply, ignore_errors=True)
    log(f"{dest}: {BRANCH} at {head} (series {series}, {len(patches)} patch(es))")
    return dest


def apply_to_clone(
    clone: Path,
    rev: str,
    *,
    patches_dir: Path | None = None,
    branch: str = BRANCH,
    force: bool = False,
) -> str:
    """Apply the series onto ``rev`` of a real upstream clone, as branch ``branch``.

    The patches are applied in a temporary detached worktree, so the clone's
    own checkout is never touched, and the branch only moves once every patch
    applied.  The user's git configuration applies here (it is their clone);
    the committer identity and dates are the overlay's fixed ones.
    """
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
            head = am_series(worktree, patches, hermetic=False)
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
            "pass --force to move it (or --branch NAME)"
        )
    git(clone, "branch", "-f", branch, head, hermetic=False)
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
                    "run export (then build again) so the wheel matches the series"
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
    status = git_out(repo, "status", "--porcelain", "--untracked-files=no")
    if status:
        log(f"warning: uncommitted changes in {repo} are not exported:\n{status}")
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
    return patch_files(patches_dir)
