"""CPU tests of the work repository's rule: the tools only add refs and refuse, never delete, move or recreate.

Each of issue 27's loss scenarios (1-8) runs on a real work repository built from the pinned wheel
and a throwaway series committed in a temporary project checkout (tests/conftest.py), and checks
that the work is still there afterwards, with no restore step.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from freetoken_overlay.pin import get_pin
from freetoken_overlay.series import BRANCH, series_hash
from freetoken_overlay.util import NOX_COMMAND_ENV, NOX_ENV, NOX_RUN_ENV, REPO_ROOT

from helpers import AUTHOR, PIN, commit_project, git, overlay, read_dir  # noqa: E402

pytestmark = pytest.mark.integration  # real git, nox or the CLI in a subprocess: nox -s quick leaves it out


def _commit(repo: Path, path: str, text: str, message: str, date: str = "1700000200 +0000") -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    git(repo, "add", "-A", path)
    git(repo, "commit", "-q", "-m", message, date=date)
    return git(repo, "rev-parse", "HEAD")


def _commit_unexported(repo: Path) -> str:
    return _commit(repo, "python/freetoken/new.py", "x = 1\n", "unexported")


def _drop_last_patch(patches: Path) -> None:
    """patches/ changes under the work repository, as a `git pull` of this checkout would do."""
    max(patches.glob("*.patch")).unlink()
    commit_project(patches, "drop the last patch")


def _kept(output: str) -> str:
    """The named ref apply printed for the series branch's old tip."""
    return re.search(r"its previous tip \w+ stays as (\S+?)(?:;|$)", output, flags=re.M).group(1)


def _break_patch(patch: Path, path: str) -> None:
    """Make ``patch`` not apply: change the first context or removed line of its hunk on ``path``."""
    head_part, marker, rest = patch.read_text().partition(f"+++ b/{path}\n")
    if not marker:
        head_part, marker, rest = patch.read_text().partition("+++ /dev/null\n")
    lines = rest.split("\n")
    line = next(i for i, text in enumerate(lines) if text[:1] in (" ", "-") and text[1:].strip())
    lines[line] += "  # a line the base does not have"
    patch.write_text(head_part + marker + "\n".join(lines))


# --------------------------------------------------------------------------- issue 27's scenarios


def test_1_force_keeps_the_old_tip_and_export_keeps_hand_edits(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    unexported = _commit_unexported(repo)
    first = min(throwaway_series.glob("*.patch"))
    edited = first.read_text().replace("A body line.", "A body line, edited by hand.")
    first.write_text(edited)  # uncommitted in the project's git
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "unexported" in proc.stderr and f"--patches {throwaway_series} --force" in proc.stderr
    assert git(repo, "rev-parse", BRANCH) == unexported
    proc = overlay("apply", "--force", "--patches", str(throwaway_series), workdir=workdir)
    kept = _kept(proc.stdout)
    assert git(repo, "rev-parse", kept) == unexported  # the old tip, by a name apply printed
    assert "A body line, edited by hand." in git(repo, "log", "-1", "--format=%B", f"{BRANCH}~1")
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    assert first.read_text() == edited
    # the printed way to carry the commit over works as printed, and the next export keeps the edit
    carry = re.search(r"to carry its commits over: (git .*)$", proc.stdout, flags=re.M).group(1)
    subprocess.run(carry, shell=True, check=True, capture_output=True,
                   env={**os.environ, **AUTHOR, "GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@example.com"})
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    assert len(read_dir(throwaway_series)) == 3 and first.read_text() == edited
    assert git(repo, "rev-parse", kept) == unexported


def test_2_a_reviewers_note_below_the_fold_survives(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    first = min(throwaway_series.glob("*.patch"))
    noted = first.read_text().replace("\n---\n", "\n---\nReviewer: why not a bigger grid?\n\n", 1)
    first.write_text(noted)
    overlay("apply", "--patches", str(throwaway_series), workdir=workdir)  # patches/ changed: a re-apply
    git(repo, "commit", "-q", "--amend", "-m", "Drop cache_report, add a test\n\nReworded.", date="1700000100 +0000")
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and str(first) in proc.stderr and "nothing was written" in proc.stderr
    assert first.read_text() == noted
    commit_project(throwaway_series, "a reviewer's note")  # once git holds it, export may replace the file
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    assert "Reviewer: why not" in git(throwaway_series.parent, "show", f"HEAD:patches/{first.name}")


def test_3_nested_repositories_and_worktrees_stay(throwaway_series: Path, workdir: Path, tmp_path: Path) -> None:
    repo = workdir / "upstream"
    nested = repo / "scratch"
    nested.mkdir()
    git(nested, "init", "-q")
    inner = _commit(nested, "notes.txt", "mine\n", "nested work")
    git(repo, "worktree", "add", "-q", "-b", "side", str(repo / "wt"), BRANCH)
    side = _commit(repo / "wt", "python/freetoken/side.py", "S = 1\n", "side work")
    _commit_unexported(repo)
    _drop_last_patch(throwaway_series)
    overlay("apply", "--force", "--patches", str(throwaway_series), workdir=workdir)
    assert git(nested, "rev-parse", "HEAD") == inner and (nested / "notes.txt").read_text() == "mine\n"
    assert git(repo / "wt", "rev-parse", "HEAD") == side and (repo / "wt/python/freetoken/side.py").is_file()


def test_4_ignored_untracked_files_stay(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    made = {p: f"{p}\n" for p in (".benchmarks/Linux/0001_run.json", ".hypothesis/examples/x", ".pytest_cache/v/x",
                                  "python/freetoken/__pycache__/x.cpython-311.pyc")}  # fmt: skip
    for path, text in made.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_text(text)
    _drop_last_patch(throwaway_series)
    overlay("apply", "--patches", str(throwaway_series), workdir=workdir)  # no --force: the tip was exported
    assert len(git(repo, "rev-list", f"{PIN.tag}..{BRANCH}").split()) == 1
    assert {p: (repo / p).read_text() for p in made} == made


def test_5_branches_and_tags_at_series_commits_stay(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    first, second = git(repo, "rev-list", "--reverse", f"{PIN.tag}..{BRANCH}").split()
    git(repo, "branch", "mark", first)
    git(repo, "tag", "t1", second)
    _commit_unexported(repo)
    _drop_last_patch(throwaway_series)
    overlay("apply", "--force", "--patches", str(throwaway_series), workdir=workdir)
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    assert git(repo, "rev-parse", "mark", "t1") == f"{first}\n{second}"


def test_6_an_empty_commit_is_refused_at_export(throwaway_series: Path, workdir: Path, tmp_path: Path) -> None:
    repo = workdir / "upstream"
    git(repo, "commit", "-q", "--allow-empty", "-m", "nothing here yet", date="1700000300 +0000")
    before = read_dir(throwaway_series)
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "nothing here yet" in proc.stderr and "rebase -i" in proc.stderr
    assert read_dir(throwaway_series) == before
    assert git(repo, "log", "-1", "--format=%s", BRANCH) == "nothing here yet"
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "wheels").symlink_to(workdir / "wheels", target_is_directory=True)
    overlay("apply", "--patches", str(throwaway_series), workdir=fresh)  # patches/ still applies


def test_7_detached_commits_and_a_rebase_in_progress_stay(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    git(repo, "switch", "-q", "--detach", BRANCH)
    detached = _commit(repo, "python/freetoken/detached.py", "D = 1\n", "made on a detached HEAD")
    _drop_last_patch(throwaway_series)
    overlay("apply", "--patches", str(throwaway_series), workdir=workdir)
    assert git(repo, "rev-parse", "HEAD") == detached and (repo / "python/freetoken/detached.py").is_file()
    assert git(repo, "symbolic-ref", "-q", "HEAD", check=False) == ""  # HEAD left where it was
    git(repo, "switch", "-q", BRANCH)
    _commit(repo, "python/freetoken/a.py", "A = 1\n", "a")
    _commit(repo, "python/freetoken/b.py", "B = 1\n", "b")
    env = {**os.environ, **AUTHOR, "GIT_SEQUENCE_EDITOR": "sed -i 's/^pick/edit/'"}
    subprocess.run(["git", "-C", str(repo), "rebase", "-q", "-i", f"{BRANCH}~2"], env=env, check=True, capture_output=True)
    todo = (repo / ".git/rebase-merge/git-rebase-todo").read_text()
    git(repo, "tag", "extra-tag", PIN.tag)  # and something new in patches/ to apply
    (throwaway_series / "0009-extra.patch").write_bytes(max(read_dir(throwaway_series).values()))
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "a rebase in progress" in proc.stderr and "rebase --continue" in proc.stderr
    assert (repo / ".git/rebase-merge/git-rebase-todo").read_text() == todo
    git(repo, "rebase", "--abort")
    assert git(repo, "log", "-2", "--format=%s", BRANCH) == "b\na"


def test_8_a_non_git_work_repo_is_refused_not_moved(tmp_path: Path, workdir: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    (workdir / "upstream").mkdir()
    (workdir / "upstream/mine.txt").write_text("not a git repository\n")
    proc = overlay("apply", "--patches", str(empty), workdir=workdir, check=False)
    assert proc.returncode == 1 and "is not a git repository; apply never moves or deletes it" in proc.stderr
    assert (workdir / "upstream/mine.txt").read_text() == "not a git repository\n"
    assert not (workdir / "upstream/.git").exists()
    move = re.search(r"move it yourself: (mv \S+ \S+) && ", proc.stderr).group(1)
    subprocess.run(move, shell=True, check=True)
    overlay("apply", "--patches", str(empty), workdir=workdir)
    assert (workdir / "upstream.not-git/mine.txt").read_text() == "not a git repository\n"
    assert not list((workdir / "upstream").rglob("mine.txt"))


# --------------------------------------------------------------------------- the daily loop


def test_the_daily_loop_end_to_end(throwaway_series: Path, workdir: Path, tmp_path: Path) -> None:
    """CONTRIBUTING's loop: edit, commit, export, commit; a colleague's patch arrives by pull; re-apply
    (the exported tip moves without --force); the wheel builds; the series' test and the page check pass."""
    repo = workdir / "upstream"
    project = throwaway_series.parent
    theirs = tmp_path / "theirs"
    git(tmp_path, "clone", "-q", str(project), str(theirs))
    _commit(repo, "python/freetoken/kernel/mine.py", "MINE = 1\n", "feat(kernel): mine")
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    commit_project(throwaway_series, "series: mine")
    before = {n: d for n, d in read_dir(throwaway_series).items() if "mine" not in n}
    # the colleague adds a patch in their own work repository and pushes it; we pull
    their_work = tmp_path / "their-work"
    their_work.mkdir()
    (their_work / "wheels").symlink_to(workdir / "wheels", target_is_directory=True)
    overlay("apply", "--patches", str(theirs / "patches"), workdir=their_work)
    _commit(their_work / "upstream", "python/freetoken/kernel/theirs.py", "THEIRS = 1\n", "feat(kernel): theirs")
    overlay("export", "--patches", str(theirs / "patches"), workdir=their_work)
    commit_project(theirs / "patches", "series: theirs")
    git(project, "pull", "-q", "--no-rebase", "--no-edit", str(theirs), check=True)
    assert {n: d for n, d in read_dir(throwaway_series).items() if n in before} == before  # one file, not all
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "run python3 -m freetoken_overlay apply" in proc.stderr  # not undone by export
    mine = git(repo, "rev-parse", BRANCH)
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir)
    assert f"its previous tip {mine} was exported (patches/ holds its commits), so no ref is kept" in proc.stdout
    assert git(repo, "branch", "--list", "kept/*") == ""  # nothing would be lost: no ref piles up
    overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir)
    assert any((workdir / "dist").glob(f"*+dg.{series_hash(throwaway_series)}-*.whl"))
    assert (repo / "python/freetoken/kernel/theirs.py").is_file() and (repo / "python/freetoken/kernel/mine.py").is_file()
    test = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(repo / "tests")],
                          cwd=repo, capture_output=True, text=True, check=False)  # fmt: skip
    assert test.returncode == 0, test.stdout + test.stderr
    pages = ["--out", str(tmp_path / "pages"), "--patches", str(throwaway_series)]  # re-rendered, as the loop says
    (tmp_path / "pages").mkdir()
    assert subprocess.run([sys.executable, "-m", "report", *pages], cwd=REPO_ROOT, check=False).returncode == 0
    assert subprocess.run([sys.executable, "-m", "report", *pages, "--check"], cwd=REPO_ROOT, check=False).returncode == 0
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)  # theirs renumbered after mine
    commit_project(throwaway_series, "series: mine and theirs")
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)  # nothing to change: a fixed point
    assert git(project, "status", "--porcelain") == "" and len(read_dir(throwaway_series)) == 4


# --------------------------------------------------------------------------- refusals and advice


def test_failing_patch_names_patch_and_file_and_changes_nothing(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    head = git(repo, "rev-parse", BRANCH)
    second = sorted(throwaway_series.glob("*.patch"))[1]
    _break_patch(second, "python/freetoken/cache_report.py")
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode != 0
    assert f"patch {second.name} (2 of 2) does not apply at python/freetoken/cache_report.py" in proc.stderr
    # git's own numbering ("Patch failed at 0001") and its `git am --continue` advice are not shown.
    assert "0001" not in proc.stderr and "git am --continue" not in proc.stderr and "hint:" not in proc.stderr
    assert f"nothing in {repo} changed" in proc.stderr and f"next: make {second} apply" in proc.stderr
    assert f"python3 -m freetoken_overlay apply --patches {throwaway_series}" in proc.stderr
    assert git(repo, "rev-parse", BRANCH) == head and git(repo, "worktree", "list").count("\n") == 0
    applied = re.search(r"switch -c fix-series (\w+)", proc.stderr).group(1)
    assert git(repo, "log", "-1", "--format=%s", applied) == "Add decode_gather module"  # patch 1, kept as a commit


def test_failing_patch_on_a_first_run_makes_only_the_base(throwaway_series: Path, tmp_path: Path) -> None:
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "wheels").symlink_to(tmp_path / "work" / "wheels", target_is_directory=True)
    first = min(throwaway_series.glob("*.patch"))
    _break_patch(first, "python/freetoken/moe/offload_cache.py")
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=fresh, check=False)
    assert proc.returncode != 0 and f"patch {first.name} (1 of 2) does not apply" in proc.stderr
    assert git(fresh / "upstream", "rev-parse", f"{PIN.tag}^{{commit}}") == PIN.base_commit
    assert git(fresh / "upstream", "branch", "--list") == ""  # no branch made


def test_untracked_files_do_not_stop_apply_but_stop_build(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    (repo / "python/freetoken/kernel/extra.py").write_text("EXTRA = 1\n")
    export = overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    assert "warning: untracked files" in export.stdout and "python/freetoken/kernel/extra.py" in export.stdout
    assert "nothing to do" in overlay("apply", "--patches", str(throwaway_series), workdir=workdir).stdout
    proc = overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "has untracked files" in proc.stderr
    assert f"git -C {repo} add -A && git -C {repo} commit" in proc.stderr
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Add extra", date="1700000300 +0000")
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    assert len(read_dir(throwaway_series)) == 3 and (repo / "python/freetoken/kernel/extra.py").is_file()


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


def test_local_changes_in_the_way_are_refused_like_git(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    version = repo / "python/freetoken/version.py"
    version.write_text(version.read_text() + "# mine\n")
    _drop_last_patch(throwaway_series)
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "uncommitted changes" in proc.stderr and f"git -C {repo} stash push" in proc.stderr
    assert version.read_text().endswith("# mine\n")
    git(repo, "stash", "push", "-q")
    overlay("apply", "--patches", str(throwaway_series), workdir=workdir)
    git(repo, "stash", "pop", "-q")
    assert version.read_text().endswith("# mine\n")


def test_reapply_keeps_branches_stashes_and_the_reflog(throwaway_series: Path, workdir: Path) -> None:
    repo = workdir / "upstream"
    git(repo, "switch", "-q", "-c", "my-idea")
    idea = _commit(repo, "python/freetoken/idea.py", "IDEA = 1\n", "an idea", date="1700000400 +0000")
    git(repo, "switch", "-q", BRANCH)
    before = git(repo, "rev-parse", BRANCH)
    git(repo, "commit", "-q", "--amend", "-m", "Drop cache_report, add a test (reworded)", date="1700000100 +0000")
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    commit_project(throwaway_series)
    version = repo / "python/freetoken/version.py"
    original = version.read_text()
    for n in (1, 2):
        version.write_text(original + f"# stashed {n}\n")
        git(repo, "stash", "push", "-q", "-m", f"stash {n}")
    stashes = git(repo, "rev-parse", "stash@{0}", "stash@{1}")
    _drop_last_patch(throwaway_series)
    overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir)  # build re-applies, unasked
    assert git(repo, "rev-parse", "my-idea") == idea
    assert git(repo, "rev-parse", "stash@{0}", "stash@{1}") == stashes
    assert git(repo, "cat-file", "-t", before) == "commit" and before in git(repo, "reflog", "--format=%H", BRANCH)


def test_export_refuses_when_head_is_on_another_branch(throwaway_series: Path, workdir: Path) -> None:
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


def test_export_keeps_patch_files_it_did_not_write(throwaway_series: Path, workdir: Path) -> None:
    first, second = sorted(throwaway_series.glob("*.patch"))
    edited = first.read_text().replace(" 2 files changed", " 2 files changed (counted by hand)")  # git am ignores it
    assert edited != first.read_text()
    first.write_text(edited)
    overlay("apply", "--patches", str(throwaway_series), workdir=workdir)
    git(workdir / "upstream", "commit", "-q", "--amend", "-m", "Reworded", date="1700000100 +0000")
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and f"{first} (has changes the project's git does not hold" in proc.stderr
    assert "nothing was written" in proc.stderr and first.read_text() == edited and second.is_file()
    extra = throwaway_series / "0007-extra.patch"
    extra.write_text("a patch file export did not write\n")
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and f"{extra} (no longer in the series, and export did not write it" in proc.stderr
    assert extra.read_text().startswith("a patch file") and first.read_text() == edited
    commit_project(throwaway_series, "the hand edit and a patch file from elsewhere")  # patches/ changed, as by a pull
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "changed since" in proc.stderr and extra.read_text().startswith("a patch file")


def test_read_only_patches_are_refused_before_anything_is_written(throwaway_series: Path, workdir: Path) -> None:
    """Also as root (who may write anywhere): a patches/ made read-only (chmod a-w) is refused, as CONTRIBUTING says."""
    _commit(workdir / "upstream", "python/freetoken/z.py", "Z = 1\n", "z")
    before = read_dir(throwaway_series)
    throwaway_series.chmod(0o555)
    try:
        proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir, check=False)
    finally:
        throwaway_series.chmod(0o755)
    assert proc.returncode == 1 and "not writable" in proc.stderr and "Traceback" not in proc.stderr
    assert read_dir(throwaway_series) == before


def test_build_refuses_uncommitted_edits_in_the_work_tree(throwaway_series: Path, workdir: Path) -> None:
    """Loss path 5 of issue 16: an uncommitted edit made build say "up to date" and test a mix of old wheel and new tests."""
    repo = workdir / "upstream"
    overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir)
    (repo / "tests/test_throwaway.py").write_text("def test_nothing():\n    assert False\n")
    proc = overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "up to date" not in proc.stdout
    assert f"{repo} has uncommitted changes" in proc.stderr and "tests/test_throwaway.py" in proc.stderr
    again = f"python3 -m freetoken_overlay build-wheel --patches {throwaway_series}"  # what ran, to run again
    assert f"git -C {repo} stash push --include-untracked, then run {again} again" in proc.stderr
    under_nox = {NOX_ENV: "1", NOX_COMMAND_ENV: "nox", NOX_RUN_ENV: "nox -s test"}  # as `nox -s test` sets them
    proc = overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir, check=False, env=under_nox)
    assert proc.stderr.startswith("nox -s test: error: ") and "then run nox -s test again" in proc.stderr
    assert "build-wheel" not in proc.stderr and "build again" not in proc.stderr  # the step `test` requires, unnamed
    git(repo, "stash", "push", "-q", "--include-untracked")
    assert "patched wheel is up to date" in overlay("build-wheel", "--patches", str(throwaway_series),
                                                     workdir=workdir).stdout  # fmt: skip
    git(repo, "switch", "-q", "-c", "elsewhere")
    proc = overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "HEAD is on branch elsewhere, but the patched wheel is built" in proc.stderr


def test_another_release_is_another_tag_and_branch_in_the_same_repository(throwaway_series: Path, workdir: Path,
                                                                          tmp_path: Path) -> None:  # fmt: skip
    repo = workdir / "upstream"
    head, marker = git(repo, "rev-parse", BRANCH), repo / "python/freetoken/mine.txt"
    marker.write_text("untracked\n")
    empty = tmp_path / "empty"
    empty.mkdir()
    overlay("apply", "--release", "0.2.0", "--patches", str(empty), workdir=workdir)
    assert git(repo, "rev-parse", "upstream-0.2.0^{commit}", f"{BRANCH}-0.2.0") == \
        f"{get_pin('0.2.0').base_commit}\n{get_pin('0.2.0').base_commit}"  # fmt: skip
    assert git(repo, "rev-parse", BRANCH) == head and git(repo, "symbolic-ref", "HEAD") == f"refs/heads/{BRANCH}"
    assert marker.read_text() == "untracked\n" and not (workdir / "upstream-0.2.0").exists()


@pytest.mark.parametrize("operation", ["rebase", "am"])
def test_an_operation_in_progress_gets_one_command_a_line(operation: str, throwaway_series: Path, workdir: Path) -> None:
    """"git -C ... rebase --continue or am --continue (or --abort)" was several commands in one line."""
    repo = workdir / "upstream"
    if operation == "rebase":
        _commit(repo, "python/freetoken/a.py", "A = 1\n", "a")
        env = {**os.environ, **AUTHOR, "GIT_SEQUENCE_EDITOR": "sed -i 's/^pick/edit/'"}
        subprocess.run(["git", "-C", str(repo), "rebase", "-q", "-i", f"{BRANCH}~1"], env=env, check=True,
                       capture_output=True)  # fmt: skip
    else:
        second = sorted(throwaway_series.glob("*.patch"))[1]
        git(repo, "am", str(second), check=False)  # already applied: git am stops in the middle
    assert (repo / ".git" / ("rebase-merge" if operation == "rebase" else "rebase-apply")).is_dir()
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False)
    lines = proc.stderr.splitlines()
    assert proc.returncode == 1 and f"  git -C {repo} {operation} --continue" in lines
    assert f"  git -C {repo} {operation} --abort" in lines
    assert f"then run this again: python3 -m freetoken_overlay apply --patches {throwaway_series}" in lines
    subprocess.run(f"git -C {repo} {operation} --abort", shell=True, check=True, capture_output=True)  # as printed
    assert not (repo / ".git/rebase-merge").exists() and not (repo / ".git/rebase-apply").exists()


def _interrupting_git(bin_dir: Path, point: str) -> None:
    """A ``git`` first on PATH that, asked for ``point`` (its subcommand and first argument), sends SIGINT to its
    caller (as Ctrl-C would) instead of running it."""
    bin_dir.mkdir()
    (bin_dir / "git").write_text(f'#!/bin/sh\ncase "$3 $4" in "{point}"*) kill -INT $PPID; sleep 30; exit 1;; esac\n'
                                 f'exec {shutil.which("git")} "$@"\n')  # fmt: skip
    (bin_dir / "git").chmod(0o755)


@pytest.mark.parametrize("point", ["tag upstream-", "read-tree", f"update-ref refs/heads/{BRANCH}"])
def test_an_interrupted_first_apply_is_named_and_finished_by_the_next(point: str, throwaway_series: Path,
                                                                      workdir: Path, tmp_path: Path) -> None:
    """A first apply interrupted before its base tag, while it filled the work tree or before its branch left "No
    commits yet": export failed inside git, and apply stopped at the files it had written.  Now export says in one
    line to run apply again, and apply finishes it: the commits of an apply that was not interrupted, a file already
    in the work tree kept (one as the commit has it is clean), git fsck clean."""
    fresh, repo = tmp_path / "fresh", tmp_path / "fresh" / "upstream"
    fresh.mkdir()
    (fresh / "wheels").symlink_to(workdir / "wheels", target_is_directory=True)
    _interrupting_git(tmp_path / "bin", point)
    path = {"PATH": f"{tmp_path / 'bin'}{os.pathsep}{os.environ['PATH']}"}
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=fresh, env=path, check=False)
    assert proc.returncode == 130 and "No commits yet" in git(repo, "status"), proc.stderr
    proc = overlay("export", "--patches", str(throwaway_series), workdir=fresh, check=False)
    again = f"python3 -m freetoken_overlay apply --patches {throwaway_series} again"
    assert proc.returncode == 1 and proc.stderr.splitlines() == [
        f"freetoken_overlay export: error: {repo} has no commits yet: its first apply did not finish; run {again}"]
    edited, done = None, workdir / "upstream"  # the same series, applied without an interruption
    if point == "read-tree":  # as if stopped while it wrote the files: one as the commit has it, one edited since
        same, edited = git(done, "ls-files").splitlines()[:2]
        for name, data in ((same, (done / same).read_bytes()), (edited, b"mine\n")):
            (repo / name).parent.mkdir(parents=True, exist_ok=True)
            (repo / name).write_bytes(data)
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=fresh)
    assert "its first apply did not finish; finishing it" in proc.stdout
    assert git(repo, "rev-parse", BRANCH) == git(done, "rev-parse", BRANCH)
    assert git(repo, "status", "--porcelain") == (f"M {edited}" if edited else "")  # (stripped: " M")
    assert edited is None or (repo / edited).read_text() == "mine\n"
    fsck = subprocess.run(["git", "-C", str(repo), "fsck"], capture_output=True, text=True, check=False)
    assert fsck.returncode == 0, fsck.stdout + fsck.stderr
