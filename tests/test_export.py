"""CPU tests of freetoken_overlay/export.py on a real work repository: a hand edit is named as one (issue 34), the
next step is named (issue 38)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from helpers import git, overlay, read_dir  # noqa: E402

pytestmark = pytest.mark.integration  # real git, nox or the CLI in a subprocess: nox -s quick leaves it out


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


def test_export_names_the_next_step_when_it_wrote_something(throwaway_series: Path, workdir: Path) -> None:
    """It printed no next step: a new patch file is untracked, so `git diff` alone does not show it."""
    repo = workdir / "upstream"
    (repo / "python/freetoken/new.py").write_text("x = 1\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "feat: new")
    proc = overlay("export", "--patches", str(throwaway_series), workdir=workdir)
    where = throwaway_series
    assert f"next: review git status {where} (a new patch file is untracked) and git diff {where}, then git add " \
           f"{where} && git commit" in proc.stdout  # fmt: skip
    untracked = subprocess.run(["git", "-C", str(where), "status", "--porcelain", "."], capture_output=True, text=True)
    assert [line for line in untracked.stdout.splitlines() if line.startswith("?? ")] != []  # what the step says
    assert "next:" not in overlay("export", "--patches", str(throwaway_series), workdir=workdir).stdout  # nothing new
