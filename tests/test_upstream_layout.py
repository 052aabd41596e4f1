"""The series' tests run in upstream's layout: ``tests/moe/`` and ``tests/kernels/`` are packages (an empty
``__init__.py``) with no ``conftest.py`` (FlashML-org/FreeToken's newest public snapshot), and collecting one of
upstream's own test files there imports nothing of the series.

Every file the series' patches create outside ``python/`` (its tests, their helper module, the benchmark the
benchmark's tests load) is copied from the work repository into a fresh tree laid out that way, beside a stand-in
for an upstream test module; pytest runs there in a subprocess with an ini of its own (no conftest of this
repository reaches it), the installed patched freetoken under test. The slow tests (nvcc builds, which do not
depend on the layout) are deselected, not uncollected: every module is still imported."""

from __future__ import annotations

import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from freetoken_overlay.series import patch_files, work_repo
from freetoken_overlay.util import Workdir
from helpers import pytest_junit

PACKAGES = ("tests/moe", "tests/kernels")  # upstream's test packages
INI = "[pytest]\nmarkers =\n    slow: long-running\n"
# An upstream test module of tests/moe: when collected on its own, no other module of the test tree is imported.
STAND_IN = '''\
import sys
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_collecting_an_upstream_test_imports_nothing_of_the_series():
    loaded = [name for name, mod in list(sys.modules.items())
              if getattr(mod, "__file__", None) and Path(mod.__file__).resolve().is_relative_to(TESTS)
              and Path(mod.__file__).name != "__init__.py" and Path(mod.__file__).resolve() != Path(__file__).resolve()]
    assert not loaded, loaded
'''
_NEW_FILE = re.compile(r"^diff --git a/(\S+) b/\1\nnew file mode", re.MULTILINE)


def series_files_outside_the_package() -> list[str]:
    """What the series' patches create outside ``python/`` (the installed package), as upstream paths."""
    found = {m.group(1) for patch in patch_files() for m in _NEW_FILE.finditer(patch.read_text())}
    return sorted(f for f in found if not f.startswith("python/"))


def _pytest(tree: Path, report: Path, *args: str) -> tuple[dict[str, int], ET.Element, str]:
    return pytest_junit(tree, report, "-c", str(tree / "pytest.ini"), "--rootdir", str(tree), *args)


@pytest.mark.integration  # pytest in a subprocess
def test_the_series_tests_pass_in_upstreams_layout(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    repo = work_repo(Workdir.from_env())
    files = series_files_outside_the_package()
    missing = [f for f in files if not (repo / f).is_file()]
    if missing:
        pytest.skip(f"the work repository {repo} lacks {', '.join(missing)} (nox -s apply makes it)")
    tree = tmp_path / "upstream"
    for f in files:
        (tree / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(repo / f, tree / f)
    assert not [f for f in files if Path(f).name == "conftest.py" and f.startswith("tests/")], "a conftest in tests/"
    for package in PACKAGES:
        (tree / package).mkdir(parents=True, exist_ok=True)
        (tree / package / "__init__.py").write_text("")
    (tree / "tests/moe/test_upstream_stand_in.py").write_text(STAND_IN)
    (tree / "pytest.ini").write_text(INI)

    alone, _, tail = _pytest(tree, tmp_path / "alone.xml", "tests/moe/test_upstream_stand_in.py")
    assert alone == {"tests": 1, "failures": 0, "errors": 0, "skipped": 0, "exit": 0}, f"{alone}:\n{tail}"

    tests = [f for f in files if re.fullmatch(r"tests/.*test_\w+\.py", f)]
    counts, suite, tail = _pytest(tree, tmp_path / "series.xml", "-m", "not slow", *tests)
    assert counts["failures"] == 0 and counts["errors"] == 0 and counts["exit"] == 0, f"{counts}:\n{tail}"
    assert counts["tests"] > counts["skipped"], f"nothing ran: {counts}"
    names = {part for case in suite.iter("testcase") for part in case.get("classname", "").split(".")}
    assert {Path(t).stem for t in tests} <= names, (sorted(names), tests)  # every module ran tests
