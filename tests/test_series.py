"""CPU tests of freetoken_overlay/series.py's apply and ensure_applied on a real work repository (issue 34):
the advice after a pull, empty patch files, kept refs only where commits would be lost, every build blocker at once."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

from freetoken_overlay.series import BRANCH

from conftest import AUTHOR, commit_project, git, overlay, read_dir  # noqa: E402

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


def test_an_empty_patch_file_is_refused_by_name(throwaway_series: Path, workdir: Path) -> None:
    """A 0-byte patch file changes neither the series hash nor what git am makes: it was "up to date"."""
    empty = throwaway_series / "0009-empty.patch"
    empty.write_bytes(b"")
    for step in ("apply", "build-wheel"):
        proc = overlay(step, "--patches", str(throwaway_series), workdir=workdir, check=False)
        assert proc.returncode == 1 and f"empty patch file(s), which no commit can come from:\n  {empty}" in proc.stderr
        assert "up to date" not in proc.stdout


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


def test_every_committed_patch_keeps_the_series_fixed_identity() -> None:
    """patches/ is a fixed point of export: one author and one date for every patch (a rebase in a contributor's work
    repository once re-authored a patch with the machine's identity, which went upstream-bound)."""
    from freetoken_overlay.util import REPO_ROOT

    heads = []
    for patch in sorted((REPO_ROOT / "patches").glob("*.patch")):
        head = patch.read_text().split("\nSubject:", 1)[0]
        author = re.search(r"^From: (.*(?:\n .*)*)$", head, re.M)
        date = re.search(r"^Date: (.*)$", head, re.M)
        assert author and date, patch.name
        heads.append((patch.name, " ".join(author[1].split()), date[1]))
    assert len(heads) >= 2
    assert {h[1:] for h in heads} == {("FreeToken decode-gather contributors <decode-gather@users.noreply.github.com>",
                                      "Mon, 30 Nov 2026 09:00:00 +0000")}, heads  # fmt: skip
