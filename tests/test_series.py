"""CPU tests of freetoken_overlay/series.py's apply and ensure_applied on a real work repository (issue 34):
the advice after a pull, empty patch files, kept refs only where commits would be lost, every build blocker at once;
and what must hold for any series a contributor builds, checked on patches/ and on patches/ with a new commit of
the contributor's own (issue 38): export is a fixed point, the commits are the stacked pull requests."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from freetoken_overlay.series import BRANCH, PATCHES_DIR, patch_files, series_hash
from report.render import render
from report.series import PULL_REQUESTS, pull_requests, series_commits, series_footprint

from helpers import AUTHOR, PIN, commit_project, git, overlay, read_dir  # noqa: E402

USER_GIT = {**os.environ, **AUTHOR, "GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@example.com"}


def _commit(repo: Path, path: str, text: str, message: str) -> str:
    (repo / path).write_text(text)
    git(repo, "add", "-A", path)
    git(repo, "commit", "-q", "-m", message, date="1700000200 +0000")
    return git(repo, "rev-parse", "HEAD")


def _pull_a_change(patches: Path) -> None:
    """patches/ changes under the work repository, as a `git pull` of this checkout would do: the last patch goes."""
    max(patches.glob("*.patch")).unlink()
    commit_project(patches, "a colleague drops the last patch")


def _run_printed(command: str) -> None:
    subprocess.run(command, shell=True, check=True, capture_output=True, env=USER_GIT)


@pytest.mark.integration
def test_after_a_pull_with_an_unexported_commit_both_steps_name_force(throwaway_series: Path, workdir: Path) -> None:
    """apply said "run export", export said "run apply first": a loop.  Both now name the way on, and it works."""
    repo = workdir / "upstream"
    _commit(repo, "python/freetoken/mine.py", "MINE = 1\n", "feat: mine, not exported")
    _pull_a_change(throwaway_series)
    force = f"python3 -m freetoken_overlay apply --patches {throwaway_series} --force"
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and f"run {force}" in proc.stderr
    assert "to put them into patches/" not in proc.stderr  # export would refuse: it is not offered as the way on
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "changed since" in proc.stderr and f"run {force}" in proc.stderr
    proc = overlay("apply", "--patches", str(throwaway_series), "--force", workdir=workdir)
    _run_printed(re.search(r"to carry its commits over: (git .*)$", proc.stdout, flags=re.M).group(1))
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    assert [n.split("-", 1)[1] for n in read_dir(throwaway_series)] == ["Add-decode_gather-module.patch",
                                                                        "feat-mine-not-exported.patch"]  # fmt: skip


@pytest.mark.integration
def test_an_empty_patch_file_is_refused_by_name(throwaway_series: Path, workdir: Path) -> None:
    """A 0-byte patch file changes neither the series hash nor what git am makes: it was "up to date"."""
    empty = throwaway_series / "0009-empty.patch"
    empty.write_bytes(b"")
    for step in ("apply", "build-wheel"):
        proc = overlay(step, "--patches", str(throwaway_series), workdir=workdir, check=False)
        assert proc.returncode == 1 and f"empty patch file(s), which no commit can come from:\n  {empty}" in proc.stderr
        assert "up to date" not in proc.stdout


@pytest.mark.integration
def test_a_ref_is_kept_only_where_commits_would_be_lost(throwaway_series: Path, workdir: Path) -> None:
    """An exported tip moves without a kept/ branch; a forced one keeps one, which `kept` calls safe to drop
    only once its commits are carried over."""
    repo = workdir / "upstream"
    _pull_a_change(throwaway_series)
    proc = overlay("apply", "--patches", str(throwaway_series), workdir=workdir)
    assert "so no ref is kept" in proc.stdout and git(repo, "branch", "--list", "kept/*") == ""
    _commit(repo, "python/freetoken/mine.py", "MINE = 1\n", "mine")
    proc = overlay("apply", "--patches", str(throwaway_series), "--force", workdir=workdir)
    kept = re.search(r"stays as (kept/\S+?);", proc.stdout).group(1)
    listed = overlay("kept", "--patches", str(throwaway_series), workdir=workdir).stdout
    assert f"{kept}: keep it: 1 commit(s) in neither {BRANCH} nor patches/:" in listed and " mine" in listed
    _run_printed(re.search(r"to carry its commits over: (git .*)$", proc.stdout, flags=re.M).group(1))
    listed = overlay("kept", "--patches", str(throwaway_series), workdir=workdir).stdout
    drop = re.search(rf"{kept}: safe to drop \(its commits are in {BRANCH} or patches/\): (git .*)$", listed,
                     flags=re.M).group(1)  # fmt: skip
    _run_printed(drop)
    assert git(repo, "branch", "--list", "kept/*") == "" and (repo / "python/freetoken/mine.py").is_file()


@pytest.mark.integration
def test_build_names_every_blocker_at_once(throwaway_series: Path, workdir: Path) -> None:
    """An unexported commit and an untracked file: one run names both (it named one per run)."""
    repo = workdir / "upstream"
    _commit(repo, "python/freetoken/mine.py", "MINE = 1\n", "mine")
    (repo / "python/freetoken/extra.py").write_text("EXTRA = 1\n")
    git(repo, "switch", "-q", "--detach")
    proc = overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "3 things stop the build, each with what goes on:" in proc.stderr
    assert f"branch {BRANCH} has commits not exported to patches/" in proc.stderr
    assert "has untracked files" in proc.stderr and "python/freetoken/extra.py" in proc.stderr
    assert f"HEAD is detached at {git(repo, 'rev-parse', 'HEAD')}" in proc.stderr


def check_stacked_pull_requests(patches: Path | None = None) -> list[dict]:
    """What holds for any series (``patches``, default patches/) as the stacked pull requests it is offered in; each
    PR's footprint.  The commits, in order, are the PRs' (none empty), each PR begins at the patch whose subject a line
    of patches/pull-requests.txt names; each PR's footprint counts only its own patches and together they are the
    series' net lines; a file a PR changes that the series added is one an earlier PR added; the upstream files
    changed are the same."""
    commits = series_commits(patches)
    prs = pull_requests(commits, patches)
    assert [c["number"] for p in prs for c in p] == [c["number"] for c in commits] and all(prs)
    lines = ((patches or PATCHES_DIR) / PULL_REQUESTS).read_text().splitlines()
    assert [p[0]["subject"] for p in prs] == [line for line in lines if line.strip() and not line.startswith("#")]
    whole = series_footprint(patches)
    parts = [series_footprint(patches, numbers={c["number"] for c in p}) for p in prs]
    assert sum(p["added"] - p["removed"] for p in parts) == whole["added"] - whole["removed"]
    for k, part in enumerate(parts):
        assert {f["path"] for f in part["series"]} <= {f["path"] for p in parts[:k] for f in p["new"]}
    assert {f["path"] for f in whole["existing"]} == {f["path"] for p in parts for f in p["existing"]}
    return parts


def check_fixed_point(patches: Path, wheels: Path, tmp_path: Path) -> None:
    """Applied to a new work directory and exported, ``patches`` comes back byte for byte."""
    before = read_dir(patches)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "wheels").symlink_to(wheels, target_is_directory=True)
    overlay("apply", "--patches", str(patches), workdir=fresh)
    overlay("export", "--patches", str(patches), workdir=fresh)
    assert read_dir(patches) == before


def test_the_series_is_stacked_pull_requests_each_with_its_own_footprint() -> None:
    """The pull requests patches/pull-requests.txt names; each PR's page says its own lines."""
    parts = check_stacked_pull_requests()
    pages = render(PATCHES_DIR.parent / "results")
    assert sorted(n for n in pages if n.startswith("PR-")) == [f"PR-{k}.md" for k in range(1, len(parts) + 1)]
    for k, p in enumerate(parts, 1):
        assert f"In all +{p['added']} / -{p['removed']} lines." in pages[f"PR-{k}.md"]


def test_the_pull_request_file_is_no_part_of_the_series_hash(tmp_path: Path) -> None:
    """patches/pull-requests.txt splits the series, it changes no commit: editing or removing it keeps the hash."""
    patches = tmp_path / "patches"
    shutil.copytree(PATCHES_DIR, patches)
    before = series_hash(patches)
    (patches / PULL_REQUESTS).write_text((patches / PULL_REQUESTS).read_text() + "# a comment\n")
    assert series_hash(patches) == before
    (patches / PULL_REQUESTS).unlink()
    assert series_hash(patches) == before and len(pull_requests(series_commits(patches), patches)) == 1


def _commit_as_the_user(repo: Path, name: str, onto: str | None = None) -> None:
    """A new file ``name`` committed in ``repo`` as its user would (their identity, dated now); with ``onto`` (a commit
    of the series branch), inserted after it, the later commits rebased onto it (their notes carried along)."""
    if onto:
        git(repo, "switch", "-q", "--detach", onto)
    (repo / name).write_text("A contributor's follow-up.\n")
    for step in (["add", name], ["commit", "-q", "-m", f"docs: {name}, a contributor's follow-up"],
                 *([["rebase", "-q", "--onto", "HEAD", onto, BRANCH]] if onto else [])):  # fmt: skip
        subprocess.run(["git", "-C", str(repo), *step], env=USER_GIT, check=True, capture_output=True)


@pytest.mark.integration
def test_a_contributors_new_commits_keep_every_series_check(tmp_path: Path, workdir: Path) -> None:
    """New commits (a fix, a reviewer's request) in .work/upstream, after the first patch and after the last, with
    the contributor's own name and date and no variable set by hand, then export: their patches carry that identity,
    the series hash changes, and the checks of every series hold.  The overlay's tests pinned five patches and one
    author: any such commit failed them."""
    patches = tmp_path / "project" / "patches"
    shutil.copytree(PATCHES_DIR, patches)
    git(patches.parent, "init", "-q")
    commit_project(patches)
    overlay("apply", "--patches", str(patches), workdir=workdir)
    repo, before = workdir / "upstream", series_hash(patches)
    _commit_as_the_user(repo, "LAST.md")
    _commit_as_the_user(repo, "FIRST.md", onto=git(repo, "rev-list", "--reverse", f"{PIN.tag}..{BRANCH}").split()[0])
    proc = overlay("export", "--patches", str(patches), workdir=workdir)
    assert "warning" not in proc.stdout + proc.stderr and series_hash(patches) != before
    new = [p for p in patch_files(patches) if "a contributor's follow-up" in p.read_text()]
    assert [p.name[:4] for p in new] == ["0002", f"{len(patch_files(PATCHES_DIR)) + 2:04d}"]
    assert all(f"From: {AUTHOR['GIT_AUTHOR_NAME']} <{AUTHOR['GIT_AUTHOR_EMAIL']}>" in p.read_text() for p in new)
    assert (patches / PULL_REQUESTS).read_bytes() == (PATCHES_DIR / PULL_REQUESTS).read_bytes()  # export kept it
    commit_project(patches, "series: a contributor's follow-ups")
    check_fixed_point(patches, workdir / "wheels", tmp_path)
    parts = check_stacked_pull_requests(patches)
    assert "FIRST.md" in {f["path"] for f in parts[0]["new"]} and "LAST.md" in {f["path"] for f in parts[-1]["new"]}
