"""CPU checks of what the docs rely on, run as a user would (no test reads the docs' prose): git clean keeps the
work repository, and ``python -m report --check`` says one line when the pages are up to date."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from freetoken_overlay.util import REPO_ROOT


def _git(cwd: Path, *args: str) -> None:
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@x"}
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, env={"PATH": "/usr/bin:/bin", **env})


@pytest.mark.integration
def test_git_clean_keeps_the_work_repository_as_the_docs_say(tmp_path: Path) -> None:
    """What Workdir's docstring (and README, CONTRIBUTING) say of `git clean`: `-xfd` deletes .work/ but the work
    repository .work/upstream, a repository of its own, which only `-xffd` deletes too."""
    checkout = tmp_path / "checkout"
    (checkout / ".work/wheels").mkdir(parents=True)
    (checkout / ".work/wheels/official.whl").write_text("cached\n")
    (checkout / ".gitignore").write_text("/.work/\n")
    _git(checkout, "init", "-q")
    _git(checkout, "add", ".gitignore")
    _git(checkout, "commit", "-q", "-m", "checkout")
    (checkout / ".work/upstream").mkdir()
    _git(checkout / ".work/upstream", "init", "-q")
    (checkout / ".work/upstream/mine.py").write_text("MINE = 1\n")
    _git(checkout / ".work/upstream", "add", "mine.py")
    _git(checkout / ".work/upstream", "commit", "-q", "-m", "work")
    _git(checkout, "clean", "-q", "-xfd")
    assert not (checkout / ".work/wheels").exists() and (checkout / ".work/upstream/mine.py").is_file()
    _git(checkout, "clean", "-q", "-xffd")
    assert not (checkout / ".work").exists()


@pytest.mark.integration
def test_report_check_says_one_line_when_up_to_date(tmp_path: Path) -> None:
    from report.render import render

    rendered = render(REPO_ROOT / "results")  # up to date by construction: the committed pages may wait for a re-render
    for name, text in rendered.items():
        (tmp_path / name).write_text(text)
    proc = subprocess.run([sys.executable, "-m", "report", "--out", str(tmp_path), "--check"], cwd=REPO_ROOT,
                          capture_output=True, text=True, check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pages = ", ".join(f"{tmp_path}/{name}" for name in rendered)
    assert proc.stdout.splitlines() == [f"[report] {pages}: up to date with the JSON"]
