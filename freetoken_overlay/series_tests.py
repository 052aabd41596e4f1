"""``python -m freetoken_overlay series-tests [-- ARGS]``: the series' tests as upstream's ``pytest`` runs them.

The wheel-built base has no tests/, so the work repository's are copied into a temporary tree laid out as upstream's
(``tests/moe/`` and ``tests/kernels/`` are packages, with no conftest.py) beside upstream's pytest settings; there
``pytest tests/moe tests/kernels ARGS`` runs against the installed freetoken, no file of this repository on sys.path.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from .util import OverlayError

PACKAGES = ("tests/moe", "tests/kernels")
SETTINGS = """\
[tool.pytest.ini_options]
testpaths = ["tests"]
python_files = ["test_*.py"]
markers = [
    "slow: takes tens of seconds (big kernel sweeps, real-checkpoint reads); deselect with -m 'not slow'",
    "needs_weights: needs a real local checkpoint, gated behind an env var (see tests/README.md)",
]
"""  # upstream's, from FlashML-org/FreeToken's pyproject.toml


def lay_out(repo: Path, tree: Path) -> None:
    """The tests of work repository ``repo`` in upstream's layout in ``tree``, a directory not there yet."""
    if not (repo / "tests").is_dir():
        raise OverlayError(f"{repo / 'tests'} does not exist: run nox -s apply (or the series adds no tests)")
    shutil.copytree(repo / "tests", tree / "tests", ignore=shutil.ignore_patterns("__pycache__"))
    for package in PACKAGES:
        (tree / package).mkdir(exist_ok=True)
        (tree / package / "__init__.py").touch()
    (tree / "pyproject.toml").write_text(SETTINGS)


def pytest_in(tree: Path, args: list[str]) -> int:
    """``pytest tests/moe tests/kernels ARGS`` in ``tree`` by this Python, PYTHONPATH dropped; its exit status."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    return subprocess.run([sys.executable, "-m", "pytest", *PACKAGES, *args], cwd=tree, env=env, check=False).returncode
