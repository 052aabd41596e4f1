"""The series' tests pass in upstream's layout, laid out and run as ``python -m freetoken_overlay series-tests`` does
(:mod:`freetoken_overlay.series_tests`): a plain ``pytest tests/moe tests/kernels`` with upstream's pytest settings,
the installed patched freetoken under test and no file of this repository on sys.path (a probe module beside the
series' tests checks that).  What any series keeps: it adds no conftest.py and no ``__init__.py`` under tests/
(upstream's test packages have their own), every test module of the series runs tests, and none fails."""

from __future__ import annotations

import re
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
def test_the_series_tests_pass_in_upstreams_layout(tmp_path: Path) -> None:
    pytest.importorskip("torch")
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
