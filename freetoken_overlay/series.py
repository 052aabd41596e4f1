"""The patch series: its hash, ``apply`` (patches/ -> git) and ``export`` (git -> patches/).

The work repository (``<workdir>/upstream/``) has one deterministic base
commit, tagged ``upstream-<version>``, and the series applied on top of it
with ``git am`` on branch ``decode-gather``.  Because the base commit, the
committer identity and the committer dates (``--committer-date-is-author-date``)
are all fixed, the same series always gives the same commit ids, and
``export`` after ``apply`` gives back ``patches/`` byte for byte.

The repository records what it was built from in its git config:
``overlay.seriesHash`` (the series applied) and ``overlay.appliedHead`` (the
branch tip that series gave, or that ``export`` wrote), and in
``.git/overlay-patches.json`` the patch files apply read or export wrote.
Nothing that neither of them wrote is dropped unsaved: ``apply`` refuses to
replace a work tree holding work patches/ does not (see
:mod:`freetoken_overlay.workrepo`), and with ``force`` saves all of it first;
``export`` refuses to replace patch files it did not write, and with ``force``
copies them aside first.

Over 500 lines: apply, export, the work-repository checks and the clone submission share the
same git plumbing and error messages (finding and saving work is in :mod:`.workrepo`).
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from .pin import BASE_AUTHOR_EMAIL, BASE_AUTHOR_NAME, BASE_DATE, DEFAULT_VERSION, Pin
from .upstream import load_source_tree, write_tree
from .util import REPO_ROOT, OverlayError, Workdir, git, git_out, hint, log
from .workrepo import (
    BRANCH,
    RepoWork,
    all_reachable,
    branch_tip,
    bundle_heads,
    dirt,
    head_place,
    on_series_branch,
    read_manifest,
    read_state,
    recorded_tag,
    repo_work,
    save_files,
    save_repo,
    sha256_hex,
    write_manifest,
    write_state,
)

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


def _series_args(pin: Pin, patches_dir: Path | None) -> list[str]:
    """The CLI options that select this release and series, for advice."""
    args = [] if pin.version == DEFAULT_VERSION else ["--release", pin.version]
    if patches_dir is not None and Path(patches_dir).resolve() != PATCHES_DIR.resolve():
        args += ["--patches", str(patches_dir)]
    return args


def _refusal(work: RepoWork, saved: Path, args: list[str]) -> str:
    """Why replacing the repository would lose work, how to keep it, and the command that goes on."""
    repo, export = work.repo, hint("export", *args)
    keep = []
    if work.status:
        keep.append(f"to keep it, commit it there (git -C {repo} add -A && git -C {repo} commit), then run {export}")
    elif work.unexported:
        keep.append(f"to keep them, run {export}")
    if work.head_elsewhere:
        keep.append(f"export takes branch {BRANCH}: git -C {repo} switch {BRANCH} goes back to it")
    go_on = (
        f"to replace it anyway, run {hint('apply', *args, '--force')}: it first saves all of it (every branch, "
        f"tag and stash entry, and the uncommitted and untracked files) to a bundle in {saved}/ and prints "
        "the commands that restore it"
    )
    return "\n".join([*work.reasons(), *keep, go_on])


def _up_to_date(repo: Path, series: str) -> str | None:
    """The branch tip when ``repo`` holds ``series`` as applied or exported, clean (other branches,
    tags and stashes may be there too: a no-op apply loses none of them)."""
    if not (repo / ".git").is_dir() or git_out(repo, "status", "--porcelain"):
        return None
    recorded, applied = read_state(repo)
    return applied if recorded == series and branch_tip(repo) == applied else None


def _replace_dir(dest: Path, new: Path) -> None:
    """Swap ``new`` into place of ``dest`` (two renames; the old copy is removed last)."""
    old = None
    if dest.exists():
        old = dest.with_name(f".{dest.name}.old-{os.getpid()}")
        os.replace(dest, old)
    os.replace(new, dest)
    if old is not None:
        shutil.rmtree(old)


def _drop_failed_apply(workdir: Workdir, *, replacing: bool = False) -> None:
    """Remove ``<workdir>/failed-apply/`` when it holds only what a failed apply left there.

    It is the overlay's own scratch copy; but where something was made in it since (commits,
    edits, branches, stashes), it is kept after a successful apply, and saved to a bundle
    first when a new failed attempt takes its place (``replacing``).
    """
    failed = workdir.failed_apply
    if not failed.exists():
        return
    tag = recorded_tag(failed) if (failed / ".git").is_dir() else None
    work = repo_work(failed, tag) if tag is not None else None
    if work is not None and not work.reasons() and not work.reflog_only:
        shutil.rmtree(failed)
        log(f"removed {failed} (the attempt an earlier apply left there; nothing was made in it since)")
    elif replacing:
        log(save_repo(failed, workdir.saved, tag=tag or "", work=work))
        shutil.rmtree(failed, ignore_errors=True)
    else:
        what = "; ".join(r.split("\n")[0] for r in work.reasons()) if work else "it is not what apply left there"
        log(f"kept {failed}: something was made in it since the apply that failed ({what}); rm -rf {failed} "
            "removes it once you no longer need it")  # fmt: skip


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
    changes, untracked files, unexported commits, HEAD off the series branch,
    other branches, tags or refs, stash entries) stops ``apply``; with ``force``
    all of it is saved (:func:`save_repo`) and the repository replaced.  Commits
    that only its reflogs name are saved without asking.  The new repository is
    built in a temporary directory first: a patch that does not apply leaves the
    previous one as it was (the failed attempt is kept at
    ``<workdir>/failed-apply/`` for inspection, until a later apply succeeds).
    """
    patches = patch_files(patches_dir)
    series = series_hash(patches_dir)
    dest = work_repo(workdir, pin.version)
    args = _series_args(pin, patches_dir)
    head = _up_to_date(dest, series)
    if head is not None:
        write_manifest(dest, {p.name: p.read_bytes() for p in patches})
        log(f"{dest} is up to date: {BRANCH} at {head} (series {series}); nothing to do")
        _drop_failed_apply(workdir)
        return dest
    work = repo_work(dest, pin.tag) if (dest / ".git").is_dir() else None
    if dest.exists() and work is None and not force:
        raise OverlayError(
            f"{dest} exists but is not a git repository\nto keep it, move it elsewhere\n"
            f"to go on anyway, run {hint('apply', *args, '--force')} (it moves it to {workdir.saved}/ first)"
        )
    if work is not None and work.reasons() and not force:
        raise OverlayError(_refusal(work, workdir.saved, args))
    files = load_source_tree(pin, cache=workdir.wheels, wheelhouse=wheelhouse)

    workdir.root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(dir=workdir.root, prefix=".apply-"))
    try:
        make_base_repo(pin, files, tmp)
        log(f"base commit {pin.base_commit} tagged {pin.tag}; applying {len(patches)} patch(es)")
        head = am_series(tmp, patches)
        write_state(tmp, series, head, pin.tag)
        write_manifest(tmp, {p.name: p.read_bytes() for p in patches})
    except PatchError as exc:
        write_state(tmp, series, git_out(tmp, "rev-parse", "HEAD"), pin.tag)  # what the attempt left
        _drop_failed_apply(workdir, replacing=True)
        os.replace(tmp, workdir.failed_apply)
        raise PatchError(_patch_advice(exc, dest, workdir, args), exc.patch, exc.index, exc.count) from None
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise

    if dest.exists() and (work is None or work.reasons() or work.reflog_only):
        everything = work is None or bool(work.reasons())
        log(save_repo(dest, workdir.saved, tag=pin.tag, everything=everything, work=work))
    _replace_dir(dest, tmp)
    _drop_failed_apply(workdir)
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
    """The work repository, (re)applied first if missing or built from another series.

    A wheel is built from branch ``decode-gather`` and the tests run from the work tree, so a
    repository holding the series with commits not exported, uncommitted or untracked files, or
    HEAD on another branch is refused: the wheel would not match what is tested.
    """
    dest = work_repo(workdir, pin.version)
    series = series_hash(patches_dir)
    if (dest / ".git").is_dir():
        recorded, applied = read_state(dest)
        if recorded == series:
            args = _series_args(pin, patches_dir)
            status = git_out(dest, "status", "--porcelain")
            if branch_tip(dest) != applied:
                raise OverlayError(
                    f"{dest}: branch {BRANCH} has commits not exported to patches/; "
                    f"run {hint('export', *args)}, then build again, so the wheel matches the series"
                )
            if status:
                raise OverlayError(
                    f"{dest} has {dirt(status)}, which the patched wheel (built from commits) would not "
                    f"hold while the tests ran from that work tree:\n{status}\n"
                    f"to keep them in the series, commit them there (git -C {dest} add -A && git -C {dest} commit), "
                    f"run {hint('export', *args)}, then build again\n"
                    f"to set them aside, git -C {dest} stash push --include-untracked, then build again "
                    f"(git -C {dest} stash pop brings them back)"
                )
            if not on_series_branch(dest):
                raise OverlayError(
                    f"{dest}: HEAD is {head_place(dest)}, but the patched wheel is built from branch {BRANCH}; "
                    f"git -C {dest} switch {BRANCH}, then build again"
                )
            return dest
        log(f"{dest} holds series {recorded}, patches/ is {series}: applying")
    return apply(pin, workdir=workdir, patches_dir=patches_dir, wheelhouse=wheelhouse)


# --------------------------------------------------------------------------- export


def _owned_patch_files(repo: Path, patches_dir: Path) -> dict[str, str]:
    """name -> sha256 of the patch files the last apply read or export wrote (files whose bytes
    these are may be replaced: the work repository holds them as commits)."""
    manifest = read_manifest(repo)
    if manifest is not None:
        return manifest
    recorded, _ = read_state(repo)  # a repository from before the manifest: the series it recorded
    if recorded == series_hash(patches_dir):
        return {p.name: sha256_hex(p.read_bytes()) for p in patch_files(patches_dir)}
    return {}


def export(pin: Pin, *, workdir: Workdir, patches_dir: Path | None = None, force: bool = False) -> list[Path]:
    """Regenerate ``patches/*.patch`` from ``upstream-<version>..decode-gather``.

    Patch files that the last apply read or export wrote are rewritten or, when the
    series no longer has them, removed; files whose bytes did not change are left
    untouched; other files in patches/ are kept.  A patch file export would replace or
    remove that it did not write (edited by hand since, or a new file) stops it; with
    ``force`` such files are copied to ``<workdir>/saved/patches.<time>/`` first.  HEAD
    must be on ``decode-gather``.  Saved bundles whose commits are all in the exported
    branch are deleted; the others are kept.
    """
    patches_dir = patches_dir or PATCHES_DIR
    args = _series_args(pin, patches_dir)
    repo = work_repo(workdir, pin.version)
    if not (repo / ".git").is_dir():
        raise OverlayError(f"{repo} does not exist: run {hint('apply', *args)} first")
    if not on_series_branch(repo):
        raise OverlayError(
            f"{repo}: HEAD is {head_place(repo)}; export writes patches/ from branch {BRANCH} only\n"
            f"to export {BRANCH}, run git -C {repo} switch {BRANCH}, then {hint('export', *args)}\n"
            f"to export the other branch's work, bring it onto {BRANCH} first (rebase or cherry-pick)"
        )
    status = git_out(repo, "status", "--porcelain")
    if status:
        log(
            f"warning: {dirt(status)} in {repo} are not exported "
            f"(commit them there first: git -C {repo} add -A && git -C {repo} commit):\n{status}"
        )
    head = git_out(repo, "rev-parse", f"refs/heads/{BRANCH}")
    patches_dir.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=workdir.root, prefix=".export-") as tmp:
        git(repo, "format-patch", *FORMAT_PATCH_FLAGS, "-o", tmp, f"{pin.tag}..{head}")
        new = {p.name: p.read_bytes() for p in Path(tmp).glob("*.patch")}
    owned = _owned_patch_files(repo, patches_dir)
    foreign = []
    for path in patch_files(patches_dir):
        data = path.read_bytes()
        if new.get(path.name) != data and owned.get(path.name) != sha256_hex(data):
            why = "edited since the last apply or export" if path.name in owned else "not written by apply or export"
            foreign.append((path, f"{'overwrite' if path.name in new else 'remove'}: {why}"))
    if foreign and not force:
        listed = "".join(f"\n  {p} (would {why})" for p, why in foreign)
        raise OverlayError(
            f"export would replace patch files it did not write:{listed}\n"
            f"to make {repo} from patches/ as they are now, run {hint('apply', *args)}\n"
            f"to export anyway, run {hint('export', *args, '--force')} (it copies them to {workdir.saved}/ first)"
        )
    saved_note = save_files([p for p, _ in foreign], workdir.saved, "patches") if foreign else None
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
    write_state(repo, series, head, pin.tag)
    write_manifest(repo, new)
    log(f"exported {len(new)} patch(es) from {pin.tag}..{BRANCH} ({head}); series {series}")
    if saved_note:
        log(saved_note)
    _drop_exported_bundles(repo, workdir, head)
    return patch_files(patches_dir)


def _drop_exported_bundles(repo: Path, workdir: Workdir, head: str) -> None:
    """Delete the saved bundles of ``repo`` every commit of which is in ``head``'s history."""
    kept = []
    for bundle in sorted(workdir.saved.glob(f"{repo.name}.*.bundle")):
        if all_reachable(repo, bundle_heads(repo, bundle), head):
            bundle.unlink()
            log(f"removed {bundle} (every commit in it is in the exported {BRANCH})")
        else:
            kept.append(bundle.name)
    if kept:
        log(f"kept {len(kept)} saved bundle(s) in {workdir.saved}/ holding commits the export does not include "
            f"(delete one when you no longer need it): {', '.join(kept)}")  # fmt: skip
