"""CPU tests of freetoken_overlay: the pin, apply/export, the patched wheel, settings.

Most tests drive ``python -m freetoken_overlay`` in a subprocess with a
temporary work directory (FT_OVERLAY_WORKDIR) whose wheel cache points at the
shared, verified one, so nothing is downloaded twice.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import os
import re
import shutil
import subprocess
import sys
import time
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freetoken_overlay import kernels, series, upstream
from freetoken_overlay.pin import DEFAULT_VERSION, PINS, get_pin
from freetoken_overlay.series import BRANCH, FORMAT_PATCH_FLAGS, series_hash
from freetoken_overlay.upstream import fetch_wheel, git_tree_id, source_files, verify_tree
from freetoken_overlay.util import (
    NOX_COMMAND_ENV,
    NOX_ENV,
    REPO_ROOT,
    VERBOSE_ENV,
    OverlayError,
    Workdir,
    env_flag,
    python_tag,
    wheelhouse_dir,
)
from freetoken_overlay.wheel import local_version, patched_wheel_name

PIN = get_pin()
AUTHOR = {"GIT_AUTHOR_NAME": "Series Author", "GIT_AUTHOR_EMAIL": "author@example.com"}


# --------------------------------------------------------------------------- helpers


def overlay(*args: str, workdir: Path, check: bool = True, env: dict[str, str] | None = None):
    """Run ``python -m freetoken_overlay args...`` (as outside nox, unless ``env`` says); the completed process."""
    outer = {k: v for k, v in os.environ.items() if k not in (NOX_ENV, NOX_COMMAND_ENV, VERBOSE_ENV)}
    full_env = {**outer, "FT_OVERLAY_WORKDIR": str(workdir), **(env or {})}
    proc = subprocess.run(
        [sys.executable, "-m", "freetoken_overlay", *args],
        cwd=REPO_ROOT, env=full_env, capture_output=True, text=True, check=False,
    )  # fmt: skip
    if check and proc.returncode != 0:
        pytest.fail(f"freetoken_overlay {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def git(repo: Path, *args: str, date: str | None = None, check: bool = True) -> str:
    env = {**os.environ, **AUTHOR, "GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@example.com"}
    if date:
        env["GIT_AUTHOR_DATE"] = date
    return subprocess.run(["git", "-C", str(repo), *args], env=env, capture_output=True, text=True,
                          check=check).stdout.strip()  # fmt: skip


def restore_steps(output: str) -> list[str]:
    """The commands a save printed (two-space indent, an optional ``   (note)`` after each)."""
    return re.findall(r"^  ((?:git|cp) .*?)(?:   \(.*\))?$", output, flags=re.MULTILINE)


def run_steps(output: str) -> list[str]:
    """Run the printed commands verbatim in a shell, as a user would (with a git identity); their stdout."""
    env = {**os.environ, **AUTHOR, "GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@example.com"}
    return [subprocess.run(step, shell=True, check=True, capture_output=True, text=True, env=env).stdout
            for step in restore_steps(output)]  # fmt: skip


def read_dir(path: Path) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(path.glob("*.patch"))}


@pytest.fixture(scope="session")
def wheel_cache() -> Path:
    """The shared cache of verified official wheels (the default work dir's)."""
    return Workdir.from_env().wheels


@pytest.fixture(scope="session")
def official_wheel(wheel_cache: Path) -> Path:
    """This interpreter's verified official wheel (from the wheelhouse when offline)."""
    return fetch_wheel(PIN, PIN.wheel_name(python_tag()), cache=wheel_cache, wheelhouse=wheelhouse_dir())


@pytest.fixture
def workdir(tmp_path: Path, wheel_cache: Path, official_wheel: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (root / "wheels").symlink_to(wheel_cache, target_is_directory=True)
    return root


@pytest.fixture
def throwaway_series(tmp_path: Path, workdir: Path) -> Path:
    """A small series (modify, add, delete, add an upstream test) exported to a temp patches/."""
    patches = tmp_path / "patches"
    patches.mkdir()
    overlay("apply", "--patches", str(patches), workdir=workdir)
    repo = workdir / "upstream"
    target = repo / "python/freetoken/moe/offload_cache.py"
    target.write_text(target.read_text() + "\n# decode-gather: throwaway change\n")
    (repo / "python/freetoken/kernel/decode_gather.py").write_text('"""Throwaway."""\n\nVALUE = 1\n')
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Add decode_gather module\n\nA body line.", date="1700000000 +0000")
    git(repo, "rm", "-q", "python/freetoken/cache_report.py")
    (repo / "tests").mkdir()
    (repo / "tests/test_throwaway.py").write_text("def test_nothing():\n    pass\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Drop cache_report, add a test", date="1700000100 +0000")
    overlay("export", "--patches", str(patches), workdir=workdir)
    assert len(read_dir(patches)) == 2
    shutil.rmtree(repo)
    overlay("apply", "--patches", str(patches), workdir=workdir)  # a fresh apply: canonical commit ids
    return patches


# --------------------------------------------------------------------------- the pin


@pytest.mark.parametrize("version", sorted(PINS))
def test_every_accepted_wheel_gives_the_pinned_tree(version: str, wheel_cache: Path) -> None:
    pin = PINS[version]
    wheelhouse = wheelhouse_dir()
    trees = set()
    for name in sorted(pin.wheels):
        if wheelhouse is not None and not (wheelhouse / name).is_file():
            pytest.skip(f"offline: {name} is not in the wheelhouse {wheelhouse}")
        wheel = fetch_wheel(pin, name, cache=wheel_cache, wheelhouse=wheelhouse)
        files = source_files(wheel)
        assert all(p.startswith("python/freetoken/") and not p.endswith(".so") for p in files)
        trees.add(git_tree_id(files))
    assert trees == {pin.tree_id}


@pytest.mark.parametrize("version", sorted(PINS))
def test_base_commit_is_deterministic(version: str, tmp_path: Path, wheel_cache: Path) -> None:
    pin = PINS[version]
    name = pin.wheel_name(python_tag())
    if wheelhouse_dir() is not None and not (wheelhouse_dir() / name).is_file():
        pytest.skip(f"offline: {name} is not in the wheelhouse")
    files = source_files(fetch_wheel(pin, name, cache=wheel_cache, wheelhouse=wheelhouse_dir()))
    commit = series.make_base_repo(pin, files, tmp_path / "repo")  # asserts tree and commit ids
    assert commit == pin.base_commit
    repo = tmp_path / "repo"
    assert git(repo, "rev-parse", f"{pin.tag}^{{commit}}", f"refs/heads/{BRANCH}") == f"{commit}\n{commit}"
    assert git(repo, "rev-parse", "HEAD^{tree}") == pin.tree_id
    assert git(repo, "status", "--porcelain") == ""


tree_paths = st.lists(
    st.lists(st.sampled_from(["a", "b", "a.py", "a-b", "a_b", "z", "kernel", "0"]), min_size=1, max_size=3),
    min_size=1, max_size=8,
)  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=tree_paths, data=st.binary(max_size=64))
def test_git_tree_id_matches_git(paths: list[list[str]], data: bytes, tmp_path_factory) -> None:
    files: dict[str, bytes] = {}
    for parts in paths:
        path = "/".join(parts)
        if any(f.startswith(path + "/") or path.startswith(f + "/") for f in files):
            continue  # a name cannot be both a file and a directory
        files[path] = data + path.encode()
    repo = tmp_path_factory.mktemp("tree")
    git(repo, "init", "-q")
    for path, content in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(content)
    git(repo, "add", "-A")
    assert git_tree_id(files) == git(repo, "write-tree")


def test_tampered_wheel_is_refused_and_nothing_applied(tmp_path: Path, official_wheel: Path) -> None:
    name = official_wheel.name
    house = tmp_path / "house"
    house.mkdir()
    data = bytearray(official_wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (house / name).write_bytes(bytes(data))
    actual = hashlib.sha256(data).hexdigest()
    proc = overlay("apply", "--wheelhouse", str(house), workdir=tmp_path / "work", check=False)
    assert proc.returncode != 0
    assert name in proc.stderr and PIN.wheels[name] in proc.stderr and actual in proc.stderr
    assert not (tmp_path / "work" / "upstream").exists()


def test_tampered_cached_wheel_says_how_to_recover(tmp_path: Path, official_wheel: Path, monkeypatch) -> None:
    work = tmp_path / "work"
    cached = work / "wheels" / official_wheel.name
    cached.parent.mkdir(parents=True)
    cached.write_bytes(official_wheel.read_bytes()[:-100])  # truncated
    proc = overlay("apply", workdir=work, check=False)
    assert proc.returncode != 0 and "sha256 mismatch" in proc.stderr
    assert f"delete it (rm {cached}); the next run downloads and verifies a fresh copy" in proc.stderr
    assert not (work / "upstream").exists()
    # Following the advice: the next fetch downloads (here: a stand-in for pip) and verifies a fresh copy.
    cached.unlink()
    monkeypatch.setattr(upstream, "_pip_download", lambda pin, name, dest: Path(shutil.copy(official_wheel, dest)))
    assert fetch_wheel(PIN, official_wheel.name, cache=cached.parent) == cached
    assert cached.read_bytes() == official_wheel.read_bytes()


def test_tree_mismatch_is_refused(official_wheel: Path) -> None:
    wheel = official_wheel
    files = source_files(wheel)
    files["python/freetoken/extra.py"] = b"x = 1\n"
    with pytest.raises(OverlayError) as info:
        verify_tree(PIN, wheel, files)
    message = str(info.value)
    assert wheel.name in message and PIN.tree_id in message and git_tree_id(files) in message


# --------------------------------------------------------------------------- apply / export


def test_empty_series_applies_base_only(tmp_path: Path, workdir: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    overlay("apply", "--patches", str(empty), workdir=workdir)
    repo = workdir / "upstream"
    assert git(repo, "rev-parse", BRANCH, PIN.tag) == f"{PIN.base_commit}\n{PIN.base_commit}"
    overlay("export", "--patches", str(empty), workdir=workdir)
    assert read_dir(empty) == {}


def test_throwaway_series_apply_export_fixed_point(throwaway_series: Path, tmp_path: Path, wheel_cache: Path) -> None:
    before = read_dir(throwaway_series)
    assert all(b"From 0000000000000000000000000000000000000000 " in p for p in before.values())
    assert [p.split(b"\nSubject: ")[1].split(b"]")[0] for p in before.values()] == [b"[PATCH 1/2", b"[PATCH 2/2"]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "wheels").symlink_to(wheel_cache, target_is_directory=True)
    overlay("apply", "--patches", str(throwaway_series), workdir=fresh)
    head = git(fresh / "upstream", "rev-parse", BRANCH)
    overlay("export", "--patches", str(throwaway_series), workdir=fresh)
    assert read_dir(throwaway_series) == before
    # Re-applying is idempotent: same commit ids, work tree left as it was.
    again = overlay("apply", "--patches", str(throwaway_series), workdir=fresh)
    assert "up to date" in again.stdout
    assert git(fresh / "upstream", "rev-parse", BRANCH) == head
    assert (fresh / "upstream/tests/test_throwaway.py").is_file()


def test_real_series_apply_export_fixed_point(tmp_path: Path, workdir: Path) -> None:
    patches = tmp_path / "patches"
    shutil.copytree(series.PATCHES_DIR, patches)
    overlay("apply", "--patches", str(patches), workdir=workdir)
    overlay("export", "--patches", str(patches), workdir=workdir)
    assert read_dir(patches) == read_dir(series.PATCHES_DIR)


def _break_patch(patch: Path, path: str) -> None:
    """Make ``patch`` not apply: change the first context or removed line of its hunk on ``path``."""
    head_part, marker, rest = patch.read_text().partition(f"+++ b/{path}\n")
    if not marker:
        head_part, marker, rest = patch.read_text().partition("+++ /dev/null\n")
    lines = rest.split("\n")
    line = next(i for i, text in enumerate(lines) if text[:1] in (" ", "-") and text[1:].strip())
    lines[line] += "  # a line the base does not have"
    patch.write_text(head_part + marker + "\n".join(lines))


def test_failing_patch_names_patch_and_file_and_keeps_work_tree(throwaway_series: Path, workdir: Path) -> None:
    head = git(workdir / "upstream", "rev-parse", BRANCH)
    second = sorted(throwaway_series.glob("*.patch"))[1]
    _break_patch(second, "python/freetoken/cache_report.py")
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode != 0
    assert f"patch {second.name} (2 of 2) does not apply at python/freetoken/cache_report.py" in proc.stderr
    # git's own numbering ("Patch failed at 0001") and its `git am --continue` advice are not shown.
    assert "0001" not in proc.stderr and "git am --continue" not in proc.stderr and "hint:" not in proc.stderr
    assert f"{workdir / 'upstream'} is unchanged" in proc.stderr
    assert f"next: make {second} apply" in proc.stderr
    assert f"python3 -m freetoken_overlay apply --patches {throwaway_series}" in proc.stderr
    assert git(workdir / "upstream", "rev-parse", BRANCH) == head
    failed = workdir / "failed-apply"
    assert git(failed, "log", "-1", "--format=%s", "HEAD") == "Add decode_gather module"  # patch 1 applied there


def test_failing_patch_on_a_first_run_claims_nothing_about_upstream(
    throwaway_series: Path, tmp_path: Path, wheel_cache: Path
) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "wheels").symlink_to(wheel_cache, target_is_directory=True)
    first = min(throwaway_series.glob("*.patch"))
    _break_patch(first, "python/freetoken/moe/offload_cache.py")
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=fresh, check=False)
    assert proc.returncode != 0 and f"patch {first.name} (1 of 2) does not apply" in proc.stderr
    assert "unchanged" not in proc.stderr and f"nothing was written to {fresh / 'upstream'}" in proc.stderr
    assert not (fresh / "upstream").exists() and (fresh / "failed-apply").is_dir()


def _commit_unexported(repo: Path) -> str:
    (repo / "python/freetoken/new.py").write_text("x = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "unexported", date="1700000200 +0000")
    return git(repo, "rev-parse", BRANCH)


def test_apply_force_saves_what_it_discards(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    unexported = _commit_unexported(repo)
    (repo / "python/freetoken/version.py").write_text("# uncommitted edit\n")
    (repo / "python/freetoken/untracked.py").write_text("y = 2\n")
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode != 0 and "uncommitted changes and untracked files" in proc.stderr
    assert f"apply --patches {throwaway_series} --force" in proc.stderr
    assert (repo / "python/freetoken/new.py").is_file()

    proc = overlay("apply", "--force", "--patches", str(throwaway_series), workdir=workdir)
    assert not (repo / "python/freetoken/new.py").exists() and not (repo / "python/freetoken/untracked.py").exists()
    bundle = Path(re.search(r"saved the work of \S+ to (\S+\.bundle)", proc.stdout).group(1))
    assert bundle.parent == workdir / "saved" and bundle.is_file()
    # The printed steps bring back the branch and the uncommitted files.
    assert len(restore_steps(proc.stdout)) == 3
    run_steps(proc.stdout)
    assert git(repo, "rev-parse", BRANCH) == unexported
    assert (repo / "python/freetoken/new.py").read_text() == "x = 1\n"
    assert (repo / "python/freetoken/version.py").read_text() == "# uncommitted edit\n"
    assert (repo / "python/freetoken/untracked.py").read_text() == "y = 2\n"
    # Kept by export: the uncommitted files in it are in no exported commit.
    git(repo, "checkout", "-q", "--", ".")
    git(repo, "clean", "-qfd")
    export = overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    assert bundle.exists() and f"kept 1 saved bundle(s) in {workdir / 'saved'}/" in export.stdout


def test_untracked_file_advice_resolves_it(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    (repo / "python/freetoken/kernel/extra.py").write_text("EXTRA = 1\n")
    export = overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    assert "warning: untracked files" in export.stdout and "python/freetoken/kernel/extra.py" in export.stdout
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode != 0 and "has untracked files" in proc.stderr
    # Export alone does not resolve it (the loop this advice used to send people round).
    commit = f"git -C {repo} add -A && git -C {repo} commit"
    assert (
        commit in proc.stderr
        and f"then run python3 -m freetoken_overlay export --patches {throwaway_series}" in proc.stderr
    )
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Add extra", date="1700000300 +0000")
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    assert len(read_dir(throwaway_series)) == 3
    head = git(repo, "rev-parse", BRANCH)
    again = overlay("apply", "--patches", str(throwaway_series), workdir=workdir)
    assert "up to date" in again.stdout and git(repo, "rev-parse", BRANCH) == head
    assert (repo / "python/freetoken/kernel/extra.py").is_file()


def test_reapply_after_export_is_a_no_op(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    head = _commit_unexported(repo)
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    before = {p: p.stat().st_mtime_ns for p in repo.rglob("*.py")}
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir)
    assert "up to date" in proc.stdout and "nothing to do" in proc.stdout
    assert git(repo, "rev-parse", BRANCH) == head  # the exported commit ids stay
    assert {p: p.stat().st_mtime_ns for p in repo.rglob("*.py")} == before


@pytest.mark.parametrize("nox", ["nox", "python3 -m nox"])
def test_advice_under_nox_names_the_session(nox: str, throwaway_series: Path, workdir: Path) -> None:
    _commit_unexported(workdir / "upstream")
    env = {NOX_ENV: "1", NOX_COMMAND_ENV: nox}  # as the noxfile sets them, for `nox` or `python3 -m nox`
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False, env=env)
    assert proc.returncode != 0
    assert f"run {nox} -s export -- --patches {throwaway_series}" in proc.stderr
    assert f"run {nox} -s apply -- --patches {throwaway_series} --force" in proc.stderr
    assert "freetoken_overlay" not in proc.stderr.split("error:", 1)[1]


def test_apply_onto_an_upstream_clone(throwaway_series: Path, tmp_path: Path, workdir: Path) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(workdir / "upstream", clone)
    git(clone, "checkout", "-q", "-b", "main", PIN.tag)
    git(clone, "branch", "-D", BRANCH)  # the copy came with one; make it anew off main
    args = ("apply", "--patches", str(throwaway_series), "--upstream", str(clone), "--rev", "main")
    overlay(*args, workdir=workdir)
    assert git(clone, "rev-parse", BRANCH) == git(workdir / "upstream", "rev-parse", BRANCH)
    assert git(clone, "rev-parse", "--abbrev-ref", "HEAD") == "main"  # its checkout untouched
    assert "up to date" in overlay(*args, workdir=workdir).stdout


def test_submission_branch_has_a_real_author(throwaway_series: Path, tmp_path: Path, workdir: Path) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(workdir / "upstream", clone)
    git(clone, "checkout", "-q", "-b", "main", PIN.tag)
    git(clone, "branch", "-D", BRANCH)
    before = sorted(p.read_bytes() for p in throwaway_series.glob("*.patch"))
    args = ("apply", "--patches", str(throwaway_series), "--upstream", str(clone), "--rev", "main")
    overlay(*args, "--author", "Ada Lovelace <ada@example.org>", workdir=workdir)
    log = git(clone, "log", "--format=%an <%ae>|%cn <%ce>|%at", f"main..{BRANCH}").splitlines()
    assert log and all(line.startswith("Ada Lovelace <ada@example.org>|Ada Lovelace <ada@example.org>|") for line in log)
    assert all(abs(int(line.rsplit("|", 1)[1]) - time.time()) < 3600 for line in log)  # dated now, not the fixed date
    # same changes as the fixed-identity branch, and patches/ untouched
    assert git(clone, "rev-parse", f"{BRANCH}^{{tree}}") == git(workdir / "upstream", "rev-parse", f"{BRANCH}^{{tree}}")
    assert sorted(p.read_bytes() for p in throwaway_series.glob("*.patch")) == before
    bad = overlay(*args, "--author", "nobody", "--branch", "other", workdir=workdir, check=False)
    assert bad.returncode != 0 and "--author 'nobody': expected 'Name <email>'" in bad.stderr


def test_format_patch_flags_are_stable() -> None:
    for flag in ("--zero-commit", "--no-signature", "--full-index", "--numbered"):
        assert flag in FORMAT_PATCH_FLAGS


def test_series_hash(tmp_path: Path) -> None:
    assert series_hash(tmp_path) == hashlib.sha256(b"").hexdigest()[:12]
    (tmp_path / "0001-a.patch").write_bytes(b"a")
    (tmp_path / "0002-b.patch").write_bytes(b"b")
    (tmp_path / "README").write_bytes(b"not part of the series")
    assert series_hash(tmp_path) == hashlib.sha256(b"ab").hexdigest()[:12]
    assert series_hash() == series_hash(series.PATCHES_DIR)


# --------------------------------------------------------------------------- no work is lost (issue 16)


def _drop_last_patch(patches: Path) -> None:
    """patches/ changes under the work repository, as a `git pull` of this checkout would do."""
    max(patches.glob("*.patch")).unlink()


def test_reapply_after_patches_change_keeps_branches_and_stashes(throwaway_series: Path, workdir: Path) -> None:
    """Loss path 1: a side branch and stash entries in .work/upstream, then patches/ changes, then build."""
    repo = workdir / "upstream"
    old_tip = git(repo, "rev-parse", BRANCH)
    git(repo, "switch", "-q", "-c", "my-idea")
    (repo / "python/freetoken/idea.py").write_text("IDEA = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "an idea", date="1700000400 +0000")
    idea = git(repo, "rev-parse", "HEAD")
    git(repo, "switch", "-q", BRANCH)
    version = repo / "python/freetoken/version.py"
    original = version.read_text()
    for n in (1, 2):
        version.write_text(original + f"# stashed {n}\n")
        git(repo, "stash", "push", "-q", "-m", f"stash {n}")
    stashes = git(repo, "rev-parse", "stash@{0}", "stash@{1}")
    _drop_last_patch(throwaway_series)

    # build (and test) re-apply first: they refuse, naming what would go and the command that goes on
    proc = overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "branch my-idea, 2 stash entries, which patches/ does not hold" in proc.stderr
    assert f"apply --patches {throwaway_series} --force" in proc.stderr
    assert git(repo, "rev-parse", "my-idea") == idea

    proc = overlay("apply", "--force", "--patches", str(throwaway_series), workdir=workdir)
    assert git(repo, "branch", "--list", "my-idea") == "" and git(repo, "stash", "list") == ""
    run_steps(proc.stdout)
    assert git(repo, "rev-parse", "my-idea") == idea
    assert git(repo, "rev-parse", "stash@{0}", "stash@{1}") == stashes
    assert git(repo, "stash", "list", "--format=%gs").splitlines() == [f"On {BRANCH}: stash {n}" for n in (2, 1)]
    assert git(repo, "rev-parse", BRANCH) == old_tip and git(repo, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"


def test_reapply_saves_commits_only_the_reflog_holds(throwaway_series: Path, workdir: Path) -> None:
    """Loss path 1: the reflog (an amended commit's old version) survives a re-apply, unasked."""
    repo = workdir / "upstream"
    before = git(repo, "rev-parse", BRANCH)
    git(repo, "commit", "-q", "--amend", "-m", "Drop cache_report, add a test (reworded)", date="1700000100 +0000")
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    _drop_last_patch(throwaway_series)
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir)
    assert f"saved the 1 commit(s) that only the reflog of {repo} held to {workdir / 'saved'}/" in proc.stdout
    assert git(repo, "cat-file", "-t", before, check=False) != "commit"  # gone from the new repository
    outputs = run_steps(proc.stdout)
    assert before[:7] in outputs[-1] and git(repo, "cat-file", "-t", before) == "commit"


def test_export_refuses_when_head_is_on_another_branch(throwaway_series: Path, workdir: Path) -> None:
    """Loss path 1: export with HEAD on another branch exported decode-gather silently."""
    repo = workdir / "upstream"
    git(repo, "switch", "-q", "-c", "my-idea")
    _commit_unexported(repo)
    before = read_dir(throwaway_series)
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "HEAD is on branch my-idea" in proc.stderr
    assert f"run git -C {repo} switch {BRANCH}, then python3 -m freetoken_overlay export" in proc.stderr
    assert read_dir(throwaway_series) == before
    git(repo, "switch", "-q", BRANCH)
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)


def test_export_drops_a_bundle_only_once_its_commits_are_exported(throwaway_series: Path, workdir: Path) -> None:
    """Loss path 2: commit X, apply --force, an unrelated commit Y, export: X's bundle stays."""
    repo = workdir / "upstream"
    x = _commit_unexported(repo)
    saved = overlay("apply", "--force", "--patches", str(throwaway_series), workdir=workdir).stdout
    bundle = Path(re.search(r" to (\S+\.bundle) ", saved).group(1))
    (repo / "python/freetoken/y.py").write_text("Y = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "unrelated", date="1700000500 +0000")
    for _ in range(2):  # the export of Y, then a no-op export
        proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir)
        assert bundle.is_file() and "kept 1 saved bundle(s)" in proc.stdout and bundle.name in proc.stdout
    # Once X is on the exported branch, its bundle goes.
    run_steps(saved)
    assert git(repo, "rev-parse", BRANCH) == x
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    assert not bundle.exists() and f"removed {bundle} (every commit in it is in the exported" in proc.stdout


def test_export_keeps_patch_files_it_did_not_write(throwaway_series: Path, workdir: Path) -> None:
    """Loss path 3: a hand edit to a patch file and an untracked 0007-*.patch survive export."""
    first = min(throwaway_series.glob("*.patch"))
    edited = first.read_text().replace("A body line.", "A body line, edited by hand.")
    first.write_text(edited)
    extra = throwaway_series / "0007-extra.patch"
    extra.write_text("a patch export did not write\n")
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1
    assert f"{first} (would overwrite: edited since the last apply or export)" in proc.stderr
    assert f"{extra} (would remove: not written by apply or export)" in proc.stderr
    assert f"export --patches {throwaway_series} --force" in proc.stderr
    assert first.read_text() == edited and extra.is_file()
    proc = overlay("export", "--force", "--patches", str(throwaway_series), workdir=workdir)
    assert first.read_text() != edited and not extra.exists()
    run_steps(proc.stdout)  # the printed cp commands put both back
    assert first.read_text() == edited and extra.read_text() == "a patch export did not write\n"


def test_restoring_a_second_save_works_as_printed_and_keeps_newer_edits(throwaway_series: Path, workdir: Path) -> None:
    """Loss path 4: the second bundle's restore commands ran into the first's refs; reset --hard dropped edits."""
    repo = workdir / "upstream"
    version = repo / "python/freetoken/version.py"
    original = version.read_text()
    a = _commit_unexported(repo)
    version.write_text(original + "# edit A\n")
    first = overlay("apply", "--force", "--patches", str(throwaway_series), workdir=workdir).stdout
    (repo / "python/freetoken/b.py").write_text("B = 1\n")
    git(repo, "add", "python/freetoken/b.py")
    git(repo, "commit", "-q", "-m", "B", date="1700000600 +0000")
    b = git(repo, "rev-parse", BRANCH)
    version.write_text(original + "# edit B\n")
    second = overlay("apply", "--force", "--patches", str(throwaway_series), workdir=workdir).stdout

    run_steps(first)
    assert git(repo, "rev-parse", BRANCH) == a and version.read_text() == original + "# edit A\n"
    # edit A is now newer than the second save: its restore stops instead of overwriting it
    with pytest.raises(subprocess.CalledProcessError) as failed:
        run_steps(second)
    assert " stash apply " in failed.value.cmd and version.read_text() == original + "# edit A\n"
    git(repo, "stash", "push", "-q", "-m", "edit A")  # set it aside, then the printed commands work as printed
    run_steps(second)
    assert git(repo, "rev-parse", BRANCH) == b and version.read_text() == original + "# edit B\n"
    assert git(repo, "stash", "list", "--format=%gs") == f"On {BRANCH}: edit A"
    first_name = re.search(r" to \S+/(\S+)\.bundle ", first).group(1)
    assert git(repo, "rev-parse", f"refs/saved/{first_name}/heads/{BRANCH}") == a


def test_build_refuses_uncommitted_edits_in_the_work_tree(throwaway_series: Path, workdir: Path) -> None:
    """Loss path 5: an uncommitted edit made build say "up to date" and test a mix of old wheel and new tests."""
    repo = workdir / "upstream"
    overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir)
    (repo / "tests/test_throwaway.py").write_text("def test_nothing():\n    assert False\n")
    proc = overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "up to date" not in proc.stdout
    assert f"{repo} has uncommitted changes" in proc.stderr and "tests/test_throwaway.py" in proc.stderr
    assert f"git -C {repo} stash push --include-untracked, then build again" in proc.stderr
    git(repo, "stash", "push", "-q", "--include-untracked")
    assert "patched wheel is up to date" in overlay("build-wheel", "--patches", str(throwaway_series),
                                                     workdir=workdir).stdout  # fmt: skip
    git(repo, "switch", "-q", "-c", "elsewhere")
    proc = overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "HEAD is on branch elsewhere, but the patched wheel is built" in proc.stderr


def test_failed_apply_scratch_goes_after_a_later_success_unless_used(throwaway_series: Path, workdir: Path) -> None:
    second = max(throwaway_series.glob("*.patch"))
    good = second.read_bytes()
    failed = workdir / "failed-apply"
    for used in (False, True):
        _break_patch(second, "python/freetoken/cache_report.py")
        assert overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False).returncode == 1
        assert failed.is_dir()
        if used:
            (failed / "python/freetoken/fix.py").write_text("made here\n")
        second.write_bytes(good)  # fixed: the work repository is up to date again
        proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir)
        assert "nothing to do" in proc.stdout
        assert failed.is_dir() == used
        assert (f"kept {failed}: something was made in it" if used else f"removed {failed}") in proc.stdout
    # a new failed attempt saves what was made in the old one before taking its place
    _break_patch(second, "python/freetoken/cache_report.py")
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert "saved the work of" in proc.stdout and not (failed / "python/freetoken/fix.py").exists()


# --------------------------------------------------------------------------- patched wheel


def _record_ok(archive: zipfile.ZipFile) -> list[str]:
    record_name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
    rows = list(csv.reader(io.StringIO(archive.read(record_name).decode())))
    assert sorted(r[0] for r in rows) == sorted(archive.namelist())
    for path, digest, size in rows:
        if path == record_name:
            assert digest == size == ""
            continue
        data = archive.read(path)
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (f"sha256={expected}", len(data)), path
    return [r[0] for r in rows]


def test_patched_wheel(throwaway_series: Path, workdir: Path, official_wheel: Path) -> None:
    overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir)
    series_id = series_hash(throwaway_series)
    wheel = workdir / "dist" / patched_wheel_name(PIN, series_id, python_tag())
    version = local_version(PIN, series_id)
    assert version == f"{DEFAULT_VERSION}+dg.{series_id}"
    official = zipfile.ZipFile(official_wheel)
    with zipfile.ZipFile(wheel) as archive:
        names = _record_ok(archive)
        assert f"freetoken-{version}.dist-info/METADATA" in names
        assert not any(n.startswith(f"freetoken-{DEFAULT_VERSION}.dist-info/") for n in names)
        assert f"\nVersion: {version}\n" in archive.read(f"freetoken-{version}.dist-info/METADATA").decode()
        assert f'__version__ = "{version}"' in archive.read("freetoken/version.py").decode()
        assert "freetoken/cache_report.py" not in names
        assert archive.read("freetoken/kernel/decode_gather.py").startswith(b'"""Throwaway')
        assert archive.read("freetoken/moe/offload_cache.py").endswith(b"# decode-gather: throwaway change\n")
        for name in official.namelist():
            if name.endswith(".so"):
                assert archive.read(name) == official.read(name)
    first = wheel.read_bytes()
    wheel.unlink()
    overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir)
    assert wheel.read_bytes() == first  # deterministic


def test_installed_freetoken_is_the_patched_wheel() -> None:
    try:
        installed = importlib.metadata.version("freetoken")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("freetoken is not installed here (run the tests with `nox -s test`)")
    import freetoken

    assert installed == freetoken.__version__ == local_version(PIN, series_hash())
    # The import closure of the patched paths is installed (requirements.IMPORT_CLOSURE).
    import freetoken.kernel.aot
    import freetoken.kernel.fast_index_copy
    import freetoken.moe.offload_cache


# --------------------------------------------------------------------------- kernels


def test_kernel_specs_are_selected_by_prefix() -> None:
    pytest.importorskip("freetoken.kernel.aot", reason="needs the patched freetoken (nox -s test)")
    assert kernels.SPEC_PREFIX == "freetoken__decode_gather"
    assert all(name.startswith(kernels.SPEC_PREFIX) for name in kernels.select_specs())
    assert kernels.select_specs("freetoken__fast_index_copy_update_flag") == ["freetoken__fast_index_copy_update_flag"]


def test_aot_kernel_builds_without_gpu(tmp_path: Path) -> None:
    pytest.importorskip("freetoken.kernel.aot", reason="needs the patched freetoken (nox -s test)")
    if shutil.which("ninja") is None:
        pytest.skip("no ninja on PATH (the build session installs it)")
    home = kernels.find_cuda_home(Workdir(tmp_path))
    if home is None:
        pytest.skip("no CUDA toolkit (nvcc) here; `nox -s build` would install one from PyPI")
    from freetoken.kernel.aot import compile_and_package_kernels

    env = {"CUDA_HOME": str(home), kernels.CUDA_ARCH_LIST_ENV: "9.0"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        built = compile_and_package_kernels(
            out_dir=tmp_path / "cache", build_dir=tmp_path / "build", specs=["freetoken__fast_index_copy_update_flag"]
        )
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert [p.name for p in built] == ["freetoken__fast_index_copy_update_flag.so"]


@pytest.mark.gpu
def test_kernel_cache_loads_on_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cache = Workdir.from_env().kernel_cache
    built = sorted(cache.glob("*/*.so"))
    if not built:
        pytest.skip(f"no kernel cache at {cache} (run `nox -s build`; the series may add no kernels yet)")
    import tvm_ffi

    for path in built:
        assert tvm_ffi.load_module(str(path)) is not None


# --------------------------------------------------------------------------- settings


def test_bad_settings_are_named(monkeypatch) -> None:
    with pytest.raises(OverlayError, match=r"FT_OVERLAY_SYSTEM_SITE='maybe'.*allowed values"):
        env_flag("FT_OVERLAY_SYSTEM_SITE", {"FT_OVERLAY_SYSTEM_SITE": "maybe"})
    with pytest.raises(OverlayError, match=r"'9\.9\.9'.*allowed values: 0\.2\.0, 0\.2\.1"):
        get_pin("9.9.9")
    monkeypatch.setenv(kernels.CUDA_ARCH_LIST_ENV, "9.0 sm90")
    with pytest.raises(OverlayError, match=r"TVM_FFI_CUDA_ARCH_LIST='9.0 sm90': sm90 .*allowed values"):
        kernels.cuda_arch_list()


@pytest.mark.parametrize("name", [VERBOSE_ENV, "FT_OVERLAY_SYSTEM_SITE"])
def test_boolean_settings_share_one_parser(name: str, tmp_path: Path) -> None:
    """Both are refused when misspelt, by every command (series-hash reads neither)."""
    proc = overlay("series-hash", workdir=tmp_path, check=False, env={name: "maybe"})
    assert proc.returncode == 1
    assert f"{name}='maybe' is not a boolean; allowed values: '1', 'true', 'yes', 'on', '', '0'" in proc.stderr
    assert overlay("series-hash", workdir=tmp_path, env={name: "Yes"}).stdout.strip() == series_hash()


def test_relative_workdir_is_refused(tmp_path: Path) -> None:
    with pytest.raises(OverlayError, match=r"FT_OVERLAY_WORKDIR='work' is a relative path; allowed: an absolute"):
        Workdir.from_env({"FT_OVERLAY_WORKDIR": "work"})
    assert Workdir.from_env({"FT_OVERLAY_WORKDIR": str(tmp_path)}).root == tmp_path
    assert Workdir.from_env({"FT_OVERLAY_WORKDIR": "~/w"}).root == Path.home() / "w"
    proc = overlay("apply", workdir=Path("work"), check=False)
    assert proc.returncode == 1 and "FT_OVERLAY_WORKDIR='work' is a relative path" in proc.stderr
    assert not (REPO_ROOT / "work").exists()


def test_verbose_only_where_pip_runs(tmp_path: Path) -> None:
    for command in ("export", "series-hash"):
        proc = overlay(command, "-v", workdir=tmp_path, check=False)
        assert proc.returncode == 2 and "unrecognized arguments: -v" in proc.stderr
    for command in ("apply", "build", "build-wheel", "build-kernels", "verify", "wheelhouse"):
        assert "--verbose" in overlay(command, "--help", workdir=tmp_path).stdout


def test_build_without_torch_says_what_to_install(tmp_path: Path, workdir: Path) -> None:
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", NOX_ENV, NOX_COMMAND_ENV)}
    proc = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "freetoken_overlay", "build"], cwd=REPO_ROOT,
        env={**env, "FT_OVERLAY_WORKDIR": str(workdir)}, capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert "this Python" in proc.stderr and "has no module 'torch'" in proc.stderr
    assert "nox -s build" in proc.stderr and " -m pip install torch==" in proc.stderr
    assert not (workdir / "upstream").exists()  # it stopped before doing anything


def _noxfile_function(name: str) -> dict:
    """A top-level function of noxfile.py (with the constants it reads), run without nox installed."""
    import ast

    tree = ast.parse((REPO_ROOT / "noxfile.py").read_text())
    wanted = {name, "_PYTEST_VALUE_OPTIONS"}
    nodes = [n for n in tree.body if getattr(n, "name", None) in wanted
             or (isinstance(n, ast.Assign) and any(getattr(t, "id", None) in wanted for t in n.targets))]  # fmt: skip
    namespace = {"ROOT": REPO_ROOT, "Path": Path}
    exec(compile(ast.Module(body=nodes, type_ignores=[]), "noxfile.py", "exec"), namespace)
    return namespace


def test_test_paths_after_double_dash_replace_the_defaults() -> None:
    split = _noxfile_function("_split_test_paths")["_split_test_paths"]
    assert split(["tests/test_gpukit.py"]) == (["tests/test_gpukit.py"], [])
    assert split(["-k", "decode_gather", "-x"]) == ([], ["-k", "decode_gather", "-x"])
    assert split(["-k", "tests", "tests/test_report.py::test_x", "-m", "gpu", "conformance"]) == (
        ["tests/test_report.py::test_x", "conformance"], ["-k", "tests", "-m", "gpu"])  # fmt: skip


def test_bare_nox_imports_the_noxfile(tmp_path: Path) -> None:
    """`nox` (its own script, not `python3 -m nox`) does not put the checkout on sys.path."""
    nox = shutil.which("nox", path=os.environ.get("PATH", "").replace(str(Path(sys.executable).parent), ""))
    if nox is None:
        pytest.skip("no nox on PATH")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", NOX_ENV, NOX_COMMAND_ENV)}
    proc = subprocess.run([nox, "-l"], cwd=REPO_ROOT, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "* test" in proc.stdout


def test_kernel_cache_built_for_this_series_is_used() -> None:
    """Under `nox -s test`, a kernel cache `nox -s build` made for the installed freetoken is the one used."""
    if not os.environ.get(NOX_ENV):
        pytest.skip("checks the environment nox -s test sets up")
    manifest = Workdir.from_env().kernel_cache / "MANIFEST.json"
    if not manifest.is_file():
        pytest.skip(f"no kernel cache at {manifest.parent} (nox -s build makes it)")
    import json

    if json.loads(manifest.read_text()).get("freetoken") != importlib.metadata.version("freetoken"):
        pytest.skip("the kernel cache is for another series (nox -s build rebuilds it)")
    assert os.environ.get("FREETOKEN_KERNEL_CACHE_DIR") == str(manifest.parent)


def test_cli_version_release_and_help(tmp_path: Path) -> None:
    proc = overlay("--version", workdir=tmp_path)
    assert proc.stdout.startswith("freetoken_overlay 0.1.0 ")
    help_text = overlay("apply", "--help", workdir=tmp_path, env={"COLUMNS": "400"}).stdout
    assert "--release {0.2.0,0.2.1}" in help_text and f"(default: {series.PATCHES_DIR})" in help_text
    proc = overlay("apply", "--release", "9.9", workdir=tmp_path, check=False)
    assert proc.returncode == 2 and "invalid choice: '9.9'" in proc.stderr


def test_nox_list_prints_no_developer_notes() -> None:
    import ast

    doc = ast.get_docstring(ast.parse((REPO_ROOT / "noxfile.py").read_text()))
    assert doc is not None and len(doc.splitlines()) <= 3 and "FT_OVERLAY_" not in doc


def test_missing_wheelhouse_is_named(tmp_path: Path) -> None:
    proc = overlay("apply", workdir=tmp_path, check=False, env={"FT_OVERLAY_WHEELHOUSE": str(tmp_path / "nope")})
    assert proc.returncode == 1 and "FT_OVERLAY_WHEELHOUSE=" in proc.stderr and "no such directory" in proc.stderr
