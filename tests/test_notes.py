"""CPU tests of freetoken_overlay/notes.py (issue 34): a reviewer's note below ``---`` goes round trip; a rebase before
any note says nothing of notes (issue 38)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from freetoken_overlay.series import BRANCH

from helpers import AUTHOR, commit_project, git, overlay, read_dir  # noqa: E402

NOTE = "Reviewer: why not a bigger grid?\n\nA second paragraph."


def test_patch_note_reads_a_typed_note_and_exports_own_block() -> None:
    from freetoken_overlay.notes import patch_note

    typed = b"Subject: [PATCH] x\n\nbody\n---\nReviewer: why?\n\n a.py | 1 +\n 1 file changed\n\ndiff --git a/a.py b/a.py\n"
    assert patch_note(typed) == "Reviewer: why?"
    exported = b"Subject: [PATCH] x\n\nbody\n---\n\nNotes:\n    Reviewer: why?\n    \n    more\n\n a.py | 1 +\n"
    assert patch_note(exported) == "Reviewer: why?\n\nmore"
    assert patch_note(b"Subject: [PATCH] x\n\nbody\n---\n a.py | 1 +\n") == ""


@pytest.mark.integration
def test_a_committed_note_stays_in_the_patch_file(throwaway_series: Path, workdir: Path, tmp_path: Path) -> None:
    """It left the file on the next export (kept only in git history): now apply makes it the commit's git note,
    a reword keeps it, and export writes it back; from then on apply + export is a fixed point."""
    repo = workdir / "upstream"
    first = min(throwaway_series.glob("*.patch"))
    first.write_text(first.read_text().replace("\n---\n", f"\n---\n{NOTE}\n\n", 1))
    commit_project(throwaway_series, "a reviewer's note")
    overlay("apply", "--patches", str(throwaway_series), workdir=workdir)
    assert git(repo, "notes", "show", f"{BRANCH}~1") == NOTE
    git(repo, "commit", "-q", "--amend", "-m", "Drop cache_report, add a test\n\nReworded.", date="1700000100 +0000")
    overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    kept = "".join(f"    {line}\n" for line in NOTE.splitlines())
    assert f"\n---\n\nNotes:\n{kept}\n" in first.read_text()  # format-patch --notes: under Notes:, indented
    assert "Reworded." in max(throwaway_series.glob("*.patch")).read_text()
    commit_project(throwaway_series, "series: reworded")
    exported = read_dir(throwaway_series)
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "wheels").symlink_to(workdir / "wheels", target_is_directory=True)
    overlay("apply", "--patches", str(throwaway_series), workdir=fresh)
    overlay("export", "--patches", str(throwaway_series), workdir=fresh)
    assert read_dir(throwaway_series) == exported


@pytest.mark.integration
def test_an_autosquash_before_any_note_does_not_warn(throwaway_series: Path, workdir: Path) -> None:
    """notes.rewriteRef named a notes ref that did not exist yet: every rebase warned, twice, that it is invalid."""
    repo = workdir / "upstream"
    target = repo / "python/freetoken/kernel/decode_gather.py"
    target.write_text(target.read_text() + "MORE = 2\n")
    git(repo, "commit", "-q", "-a", "--fixup", f"{BRANCH}~1")
    env = {**os.environ, **AUTHOR, "GIT_COMMITTER_NAME": "c", "GIT_COMMITTER_EMAIL": "c@example.com",
           "GIT_SEQUENCE_EDITOR": ":"}  # fmt: skip
    proc = subprocess.run(["git", "-C", str(repo), "rebase", "-q", "-i", "--autosquash", "upstream-0.2.1"], env=env,
                          capture_output=True, text=True, check=True)  # fmt: skip
    assert "warning" not in proc.stdout + proc.stderr and git(repo, "notes", "list") == ""
    assert git(repo, "rev-list", "--count", f"upstream-0.2.1..{BRANCH}") == "2"


@pytest.mark.integration
def test_git_fsck_is_clean_in_the_applied_tree(throwaway_series: Path, workdir: Path, tmp_path: Path) -> None:
    """The notes ref's first commit (made where there is no note yet) points at the empty tree, which no step wrote:
    git fsck exited 2, "missing tree 4b825dc...".  Now a first apply writes it, and any apply writes it where an
    earlier one did not (the repository is otherwise up to date)."""
    fresh, repo = tmp_path / "fresh", tmp_path / "fresh" / "upstream"
    fresh.mkdir()
    (fresh / "wheels").symlink_to(workdir / "wheels", target_is_directory=True)

    def fsck() -> subprocess.CompletedProcess:
        return subprocess.run(["git", "-C", str(repo), "fsck", "--strict"], capture_output=True, text=True, check=False)

    overlay("apply", "--patches", str(throwaway_series), workdir=fresh)
    assert fsck().returncode == 0, fsck().stdout + fsck().stderr
    tree = git(repo, "rev-parse", "refs/notes/commits^{tree}")
    (repo / ".git/objects" / tree[:2] / tree[2:]).unlink()  # as a work repository applied before this fix has it
    assert fsck().returncode == 2 and f"missing tree {tree}" in fsck().stdout + fsck().stderr
    assert "up to date" in overlay("apply", "--patches", str(throwaway_series), workdir=fresh).stdout
    assert fsck().returncode == 0, fsck().stdout + fsck().stderr
