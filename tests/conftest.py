"""Shared fixtures of the CPU tests: the overlay's (a work directory, a throwaway series in a project checkout) and a
synthetic results tree (clearly labelled) for the report; what they use is tests/helpers.py's."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from freetoken_overlay.upstream import fetch_wheel
from freetoken_overlay.util import Workdir, python_tag, wheelhouse_dir

from helpers import PIN, commit_project, git, overlay, read_dir, write_synthetic_results  # noqa: E402


@pytest.fixture(scope="session")
def wheel_cache() -> Path:
    """The shared cache of verified official wheels (the default work dir's)."""
    return Workdir.from_env().wheels


@pytest.fixture(scope="session")
def official_wheel(wheel_cache: Path) -> Path:
    """This interpreter's verified official wheel (from the wheelhouse when offline)."""
    return fetch_wheel(PIN, PIN.wheel_name(python_tag()), cache=wheel_cache, wheelhouse=wheelhouse_dir())


@pytest.fixture
def workdir(tmp_path: Path, wheel_cache: Path, official_wheel: Path) -> Path:
    root = tmp_path / "work"
    root.mkdir()
    (root / "wheels").symlink_to(wheel_cache, target_is_directory=True)
    return root


@pytest.fixture(scope="session")
def throwaway_template(tmp_path_factory, wheel_cache: Path, official_wheel: Path) -> Path:
    """Made once per test session: ``project/patches/`` (a git checkout holding a small series: modify, add, delete,
    add an upstream test) and ``work/upstream/`` where it was freshly applied.  Tests get a copy (throwaway_series)."""
    root = tmp_path_factory.mktemp("throwaway")
    workdir = root / "work"
    workdir.mkdir()
    (workdir / "wheels").symlink_to(wheel_cache, target_is_directory=True)
    patches = root / "project" / "patches"
    patches.mkdir(parents=True)
    git(patches.parent, "init", "-q")
    overlay("apply", "--patches", str(patches), workdir=workdir)
    repo = workdir / "upstream"
    target = repo / "python/freetoken/moe/offload_cache.py"
    target.write_text(target.read_text() + "\n# decode-gather: throwaway change\n")
    (repo / "python/freetoken/kernel/decode_gather.py").write_text('"""Throwaway."""\n\nVALUE = 1\n')
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Add decode_gather module\n\nA body line.", date="1700000000 +0000")
    git(repo, "rm", "-q", "python/freetoken/cache_report.py")
    (repo / "tests").mkdir()
    (repo / "tests/test_throwaway.py").write_text("def test_nothing():\n    pass\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "Drop cache_report, add a test", date="1700000100 +0000")
    overlay("export", "--patches", str(patches), workdir=workdir)
    assert len(read_dir(patches)) == 2
    commit_project(patches)
    shutil.rmtree(repo)  # (the fixture's own doing: the tools never delete it)
    overlay("apply", "--patches", str(patches), workdir=workdir)  # a fresh apply: canonical commit ids
    git(workdir / "upstream", "repack", "-a", "-d", "-q")  # its objects in one pack: each test copies a few files, not 700
    return root


@pytest.fixture
def throwaway_series(tmp_path: Path, workdir: Path, throwaway_template: Path) -> Path:
    """A copy of the session's throwaway series for this test: ``tmp_path/project/patches/`` (committed in that
    checkout's git) and the work repository ``workdir/upstream/`` where it is applied; the patches directory."""
    shutil.copytree(throwaway_template / "project", tmp_path / "project", symlinks=True)
    shutil.copytree(throwaway_template / "work" / "upstream", workdir / "upstream", symlinks=True)
    return tmp_path / "project" / "patches"


@pytest.fixture
def fake_kernel_build(tmp_path: Path, monkeypatch) -> list[list[str]]:
    """freetoken's AOT compile replaced by one that writes a stand-in .so per spec (no nvcc), for arch 9.0 and a
    stand-in CUDA_HOME: the list it returns gets each build's specs, sorted."""
    aot = pytest.importorskip("freetoken.kernel.aot", reason="needs the patched freetoken (nox -s test)")
    from freetoken_overlay import kernel_cache

    compiled: list[list[str]] = []

    def fake_compile(out_dir, build_dir, specs, verbose):
        compiled.append(sorted(specs))
        built = [Path(out_dir) / name / f"{name}.so" for name in specs]
        for so in built:
            so.parent.mkdir(parents=True, exist_ok=True)
            so.write_bytes(b"\x7fELF" + so.stem.encode())
        return built

    monkeypatch.setattr(aot, "compile_and_package_kernels", fake_compile)
    monkeypatch.setattr(kernel_cache, "ensure_cuda_home", lambda workdir, pip_args: tmp_path / "cuda")
    monkeypatch.setenv(kernel_cache.CUDA_ARCH_LIST_ENV, "9.0")
    monkeypatch.setenv("CUDA_HOME", str(tmp_path / "cuda"))  # the build sets it; restored after the test
    return compiled


@pytest.fixture
def synthetic_results(tmp_path) -> Path:
    """``tmp/results/synthetic-gpu/`` with every document kind the report reads."""
    root = tmp_path / "results"
    write_synthetic_results(root)
    return root
