"""The series' tests pass in upstream's layout, laid out and run as ``python -m freetoken_overlay series-tests`` does
(:mod:`freetoken_overlay.series_tests`): a plain ``pytest tests/moe tests/kernels`` with upstream's pytest settings,
the installed patched freetoken under test and no file of this repository on sys.path (a probe module beside the
series' tests checks that).  What any series keeps: it adds no conftest.py and no ``__init__.py`` under tests/
(upstream's test packages have their own), every test module of the series runs tests, and none fails."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from freetoken_overlay.series import work_repo
from freetoken_overlay.series_tests import lay_out, pytest_in
from freetoken_overlay.util import REPO_ROOT, Workdir

PROBE = f'''\
import importlib.util
import sys
from pathlib import Path

import freetoken


def test_nothing_of_the_overlay_is_importable():
    assert Path({str(REPO_ROOT)!r}) not in {{Path(p or ".").resolve() for p in sys.path}}, sys.path
    assert importlib.util.find_spec("freetoken_overlay") is None
    assert "site-packages" in Path(freetoken.__file__).parts, freetoken.__file__  # the wheel, not the work repo
'''


@pytest.mark.integration  # pytest in a subprocess
@pytest.mark.parametrize("jit_off", [False, True], ids=["jit", "FREETOKEN_DISABLE_JIT=1"])
def test_the_series_tests_pass_in_upstreams_layout(tmp_path: Path, monkeypatch, jit_off: bool) -> None:
    """... and again with FREETOKEN_DISABLE_JIT=1, where a test needing an unbuilt kernel must skip, not fail."""
    pytest.importorskip("torch")
    if jit_off:
        monkeypatch.setenv("FREETOKEN_DISABLE_JIT", "1")
    repo = work_repo(Workdir.from_env())
    if not (repo / "tests").is_dir():
        pytest.skip(f"the work repository {repo} has no tests/ (nox -s apply makes it)")
    files = sorted(p.relative_to(repo).as_posix() for p in (repo / "tests").rglob("*.py"))
    assert not [f for f in files if Path(f).name in ("conftest.py", "__init__.py")], files
    tree = tmp_path / "upstream"
    lay_out(repo, tree)
    (tree / "tests/moe/test_zz_overlay_probe.py").write_text(PROBE)
    status = pytest_in(tree, ["-p", "no:cacheprovider", "-q", "-rs", f"--junitxml={tmp_path / 'junit.xml'}"])
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    assert status == 0 and counts["failures"] == counts["errors"] == 0, counts
    assert counts["tests"] > counts["skipped"], f"nothing ran: {counts}"
    ran = {part for case in suite.iter("testcase") for part in case.get("classname", "").split(".")}
    modules = {Path(f).stem for f in files if re.fullmatch(r"tests/(moe|kernels)/test_\w+\.py", f)}
    assert modules and modules | {"test_zz_overlay_probe"} <= ran, (sorted(ran), sorted(modules))


@pytest.mark.integration  # git and pytest in subprocesses
def test_each_pull_request_passes_its_own_tests_without_the_later_ones(tmp_path: Path) -> None:
    """Each stacked pull request but the last (which is the whole series, run above) is taken as a maintainer would
    take it alone: the work repository at its last commit, its python/ first on the path (a probe checks that the
    freetoken under test is that one), no kernel cache (one is built for one series) and its tests laid out as
    upstream's; a plain pytest passes there."""
    pytest.importorskip("torch")
    from report.series import pull_requests

    repo = work_repo(Workdir.from_env())
    tags = subprocess.run(["git", "-C", str(repo), "tag", "--list", "upstream-*"], capture_output=True, text=True)
    if not (repo / "tests").is_dir() or not tags.stdout.split():
        pytest.skip(f"the work repository {repo} is not applied (nox -s apply makes it)")
    log = subprocess.run(["git", "-C", str(repo), "log", "--reverse", "--format=%H %s",
                          f"{tags.stdout.split()[0]}..HEAD"], capture_output=True, text=True, check=True)  # fmt: skip
    commits = [dict(zip(("sha", "subject"), line.split(" ", 1))) for line in log.stdout.splitlines()]
    stacks = pull_requests(commits)
    if len(stacks) < 2:
        pytest.skip("the series is one pull request: the test above runs it")
    for n, stack in enumerate(stacks[:-1], 1):
        tree, upstream = tmp_path / f"pr{n}", tmp_path / f"pr{n}-upstream"
        tree.mkdir()
        archive = subprocess.run(["git", "-C", str(repo), "archive", stack[-1]["sha"], "python", "tests"],
                                 capture_output=True, check=True).stdout  # fmt: skip
        subprocess.run(["tar", "-x", "-C", str(tree)], input=archive, check=True)
        lay_out(tree, upstream)
        (upstream / "tests/moe/test_zz_stack_probe.py").write_text(
            f"import freetoken\n\n\ndef test_the_freetoken_under_test_is_this_stacks():\n"
            f"    assert freetoken.__file__.startswith({str(tree / 'python')!r}), freetoken.__file__\n")
        # a kernel cache is built for one series (its module names follow the stack's rings): not this stack's
        env = {k: v for k, v in os.environ.items() if k not in ("FREETOKEN_KERNEL_CACHE_DIR", "FREETOKEN_DISABLE_JIT")}
        env["PYTHONPATH"] = str(tree / "python")
        proc = subprocess.run([sys.executable, "-m", "pytest", "tests/moe", "tests/kernels", "-p", "no:cacheprovider",
                               "-q", "-x"], cwd=upstream, env=env, capture_output=True, text=True)  # fmt: skip
        assert proc.returncode == 0, f"PR-{n} ({stack[0]['subject']} .. {stack[-1]['subject']}):\n{proc.stdout[-3000:]}"


def test_the_overlay_and_the_series_decide_with_one_margin() -> None:
    """The series names the practical margin of a verdict once (freetoken.kernel.decode_gather.MARGIN: its
    benchmark and ft bench bw's pick); the overlay's verdicts (suite.stats, stdlib-only) must use the same one."""
    pytest.importorskip("torch")
    from freetoken.kernel import decode_gather

    from suite.stats import MARGIN

    assert decode_gather.MARGIN == MARGIN
