"""CPU tests of freetoken_overlay/export.py on a real work repository (issue 34): a hand edit is named as one."""

from __future__ import annotations

from pathlib import Path

from conftest import overlay, read_dir  # noqa: E402


def test_a_note_typed_below_the_fold_is_named_as_a_hand_edit_first(throwaway_series: Path, workdir: Path) -> None:
    """It got "patches/ changed since ... a pull or an edit" first, and the hand-edit message only after an apply."""
    first = min(throwaway_series.glob("*.patch"))
    noted = first.read_text().replace("\n---\n", "\n---\nReviewer: why not a bigger grid?\n\n", 1)
    first.write_text(noted)  # not committed in the project's git, not applied
    before = read_dir(throwaway_series)
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir, check=False)
    assert proc.returncode == 1 and "changed since" not in proc.stderr
    assert f"{first} (has changes the project's git does not hold: a hand edit or a note?)" in proc.stderr
    assert "commit them in this checkout (git add + git commit)" in proc.stderr and read_dir(throwaway_series) == before
