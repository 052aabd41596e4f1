"""Every test file the series adds passes under a ROCm torch (``torch.version.hip`` set) as upstream's ROCm
job runs them, ``pytest ... -m "not slow"``: none fails, none errors, the GPU-only ones skip (the slow ones,
nvcc SASS builds that need no torch at all, run in the CUDA jobs and in this suite's own pass over the files).

The series' test files are read from patches/ (the files its patches create) and run in upstream's layout
(freetoken_overlay.series_tests) in a pytest subprocess whose first plugin makes the imported torch report
ROCm, as a ROCm build does (``torch.version.hip`` a version, ``torch.version.cuda`` None)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from freetoken_overlay.series import patch_files, work_repo
from freetoken_overlay.series_tests import PACKAGES, lay_out
from freetoken_overlay.util import Workdir
from helpers import pytest_junit

FAKE_ROCM = """\
import torch

torch.version.hip = "6.2.41133"
torch.version.cuda = None
"""
_NEW_TEST = re.compile(r"^diff --git a/(tests/\S*test_\w+\.py) b/\1\nnew file mode", re.MULTILINE)


def series_test_files() -> list[str]:
    """The test modules the series' patches create, as paths in the upstream tree."""
    return sorted({m.group(1) for patch in patch_files() for m in _NEW_TEST.finditer(patch.read_text())})


def test_the_series_adds_test_files() -> None:
    files = series_test_files()
    assert "tests/moe/test_decode_gather_auto.py" in files and "tests/kernels/test_decode_gather.py" in files, files


@pytest.mark.integration
def test_series_tests_pass_under_a_rocm_torch(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    repo = work_repo(Workdir.from_env())
    files = series_test_files()
    missing = [f for f in files if not (repo / f).is_file()]
    if missing:
        pytest.skip(f"the work repository {repo} lacks {', '.join(missing)} (nox -s apply makes it)")
    (tmp_path / "fake_rocm.py").write_text(FAKE_ROCM)
    lay_out(repo, tmp_path / "upstream")
    counts, suite, tail = pytest_junit(tmp_path / "upstream", tmp_path / "junit.xml", "-p", "fake_rocm", "-rs", "-m",
                                       "not slow", *PACKAGES, pythonpath=str(tmp_path))  # fmt: skip
    assert counts["failures"] == 0 and counts["errors"] == 0 and counts["exit"] == 0, f"{counts}:\n{tail}"
    assert counts["tests"] > counts["skipped"], f"nothing ran under the fake ROCm torch: {counts}"
    skips = [s.get("message", "") for s in suite.iter("skipped")]
    assert any("ROCm" in s for s in skips), f"no test skipped for ROCm: the fake did not take ({counts})"
