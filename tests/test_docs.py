"""CPU checks that what README.md, CONTRIBUTING.md and .ci/run say is what happens (issue 34)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from freetoken_overlay.util import REPO_ROOT


def _text(name: str) -> str:
    return " ".join((REPO_ROOT / name).read_text().split())


def _git(cwd: Path, *args: str) -> None:
    env = {"GIT_AUTHOR_NAME": "a", "GIT_AUTHOR_EMAIL": "a@x", "GIT_COMMITTER_NAME": "a", "GIT_COMMITTER_EMAIL": "a@x"}
    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True, env={"PATH": "/usr/bin:/bin", **env})


def test_git_clean_keeps_the_work_repository_as_the_docs_say(tmp_path: Path) -> None:
    """README and CONTRIBUTING said `git clean -xfd` deletes .work/; git skips the nested repository .work/upstream."""
    for name in ("README.md", "CONTRIBUTING.md"):
        assert ("`git clean -xfd` deletes all of it but the work repository `.work/upstream/`, which git clean skips "
                "as a repository of its own unless `-f` is given twice (`git clean -xffd` deletes it too)") in _text(name)
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


def test_readme_names_the_first_run_time_and_disk() -> None:
    """README named no first-run time or disk use: now it does, with the load it was measured under."""
    readme = _text("README.md")
    line = re.search(r"On a fresh clone of the 2-core CPU workplace \(load average [\d.]+ to [\d.]+[^)]*\), `nox -s "
                     r"apply build` took (\d+) s and `nox -s test` (\d+) s \(a re-run (\d+) s\); `.nox/` and `.work/` "
                     r"then held ([\d.]+) GB", readme)  # fmt: skip
    assert line, "README: the first-run line"
    assert float(line.group(4)) <= 2.5  # disk does not depend on the load: issue 34's target


def test_ci_says_which_tests_skip_without_a_kernel_cache() -> None:
    """`.ci/run` runs `nox -s test` on a fresh clone, which has no kernel cache: the tests that need one skip; say which."""
    ci = (REPO_ROOT / ".ci/run").read_text()
    for reason in ("no kernel cache at", "needs a built kernel cache (FREETOKEN_KERNEL_CACHE_DIR)"):
        assert reason in ci
    assert "no kernel cache at" in (REPO_ROOT / "tests/test_settings_and_nox.py").read_text()  # where it skips


def test_report_check_says_one_line_when_up_to_date(tmp_path: Path) -> None:
    proc = subprocess.run([sys.executable, "-m", "report", "--check"], cwd=REPO_ROOT, capture_output=True, text=True,
                          check=False)  # fmt: skip
    assert proc.returncode == 0, proc.stderr
    pages = ", ".join(f"{REPO_ROOT / 'results'}/{name}" for name in ("README.md", "REPORT.md", "PR-1.md", "PR-2.md"))
    assert proc.stdout.splitlines() == [f"[report] {pages}: up to date with the JSON"]
