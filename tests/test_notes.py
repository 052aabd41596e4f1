"""CPU tests of freetoken_overlay/notes.py (issue 34): a reviewer's note below ``---`` goes round trip."""

from __future__ import annotations

from pathlib import Path

from freetoken_overlay.series import BRANCH

from conftest import commit_project, git, overlay, read_dir  # noqa: E402

NOTE = "Reviewer: why not a bigger grid?\n\nA second paragraph."


def test_patch_note_reads_a_typed_note_and_exports_own_block() -> None:
    from freetoken_overlay.notes import patch_note

    typed = b"Subject: [PATCH] x\n\nbody\n---\nReviewer: why?\n\n a.py | 1 +\n 1 file changed\n\ndiff --git a/a.py b/a.py\n"
    assert patch_note(typed) == "Reviewer: why?"
    exported = b"Subject: [PATCH] x\n\nbody\n---\n\nNotes:\n    Reviewer: why?\n    \n    more\n\n a.py | 1 +\n"
    assert patch_note(exported) == "Reviewer: why?\n\nmore"
    assert patch_note(b"Subject: [PATCH] x\n\nbody\n---\n a.py | 1 +\n") == ""


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
