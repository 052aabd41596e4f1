"""One search order for every CUDA tool: the SASS gate's tools, compute-sanitizer and the kernel build's toolkit."""

from __future__ import annotations

import importlib.metadata
import json
import os
from pathlib import Path

import pytest

from conformance.gpu.run_sanitizer import find_sanitizer
from freetoken_overlay import kernel_cache, toolchain
from freetoken_overlay.util import OverlayError, Workdir


def _toolkit(root: Path, *tools: str, cudart: bool = False) -> Path:
    """``root/bin/<tool>`` stubs (and ``lib64/libcudart.so``): a fake toolkit."""
    (root / "bin").mkdir(parents=True)
    for tool in tools:
        exe = root / "bin" / tool
        exe.write_text("#!/bin/sh\nexit 0\n")
        exe.chmod(0o755)
    if cudart:
        (root / "lib64").mkdir()
        (root / "lib64" / "libcudart.so").write_text("")
    return root


@pytest.fixture
def clean_env(monkeypatch, tmp_path):
    """No tool variable, no CUDA_HOME/CUDA_PATH, an empty PATH and default toolkit, no wheel copies."""
    for var in (*toolchain.TOOL_ENV.values(), "CUDA_HOME", "CUDA_PATH"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    monkeypatch.setattr(toolchain, "DEFAULT_CUDA_HOME", str(tmp_path / "none"))
    monkeypatch.setattr(toolchain, "package_dirs", lambda name: [])
    return monkeypatch


def test_every_tool_is_found_in_the_same_order(clean_env, tmp_path):
    home = _toolkit(tmp_path / "home", "nvcc", "cuobjdump", "compute-sanitizer", cudart=True)
    on_path = _toolkit(tmp_path / "path", "nvcc", "cuobjdump", "compute-sanitizer", cudart=True)
    clean_env.setenv("PATH", str(on_path / "bin"))
    for tool in ("nvcc", "cuobjdump", "compute-sanitizer"):
        assert toolchain.find_tool(tool) == str(on_path / "bin" / tool)
    assert find_sanitizer(None) == str(on_path / "bin" / "compute-sanitizer")
    assert kernel_cache.find_cuda_home(Workdir(tmp_path / "work")) == on_path
    clean_env.setenv("CUDA_HOME", str(home))  # the toolkit variable comes before PATH, for every tool
    for tool in ("nvcc", "cuobjdump", "compute-sanitizer"):
        assert toolchain.find_tool(tool) == str(home / "bin" / tool)
    assert find_sanitizer(None) == str(home / "bin" / "compute-sanitizer")
    assert kernel_cache.find_cuda_home(Workdir(tmp_path / "work")) == home
    clean_env.setenv("COMPUTE_SANITIZER", str(on_path / "bin" / "compute-sanitizer"))  # the tool's own variable first
    assert find_sanitizer(None) == str(on_path / "bin" / "compute-sanitizer")
    assert find_sanitizer("/explicit") == "/explicit"


def test_cuda_home_skips_a_toolkit_without_cudart_and_refuses_a_bad_variable(clean_env, tmp_path):
    bare = _toolkit(tmp_path / "bare", "nvcc")
    full = _toolkit(tmp_path / "full", "nvcc", cudart=True)
    clean_env.setenv("PATH", os.pathsep.join([str(bare / "bin"), str(full / "bin")]))
    assert toolchain.find_tool("nvcc") == str(bare / "bin" / "nvcc")
    assert kernel_cache.find_cuda_home(Workdir(tmp_path / "work")) == full
    clean_env.setenv("CUDA_HOME", str(tmp_path / "nowhere"))
    with pytest.raises(OverlayError, match="CUDA_HOME='.*nowhere': no bin/nvcc there"):
        kernel_cache.find_cuda_home(Workdir(tmp_path / "work"))
    clean_env.delenv("CUDA_HOME")
    clean_env.setenv("NVCC", str(tmp_path / "typo"))
    with pytest.raises(OverlayError, match="NVCC="):
        kernel_cache.find_cuda_home(Workdir(tmp_path / "work"))
    clean_env.setenv("PATH", str(tmp_path / "empty"))
    clean_env.delenv("NVCC")
    assert kernel_cache.find_cuda_home(Workdir(tmp_path / "work")) is None


def test_kernel_cache_is_rebuilt_only_when_an_input_changed(tmp_path: Path, monkeypatch, fake_kernel_build) -> None:
    """A second build from the same inputs compiles nothing; another arch list or a missing .so rebuilds."""
    workdir = Workdir(tmp_path / "work")
    compiled = fake_kernel_build
    monkeypatch.setattr(kernel_cache, "select_specs", lambda: ["freetoken__decode_gather_16x4x8192"])
    for _ in range(2):
        kernel_cache.build_kernel_cache(workdir, pip_args=[])
    assert len(compiled) == 1
    monkeypatch.setenv(kernel_cache.CUDA_ARCH_LIST_ENV, "9.0 12.0")
    kernel_cache.build_kernel_cache(workdir, pip_args=[])
    assert len(compiled) == 2
    (workdir.kernel_cache / "freetoken__decode_gather_16x4x8192" / "freetoken__decode_gather_16x4x8192.so").unlink()
    kernel_cache.build_kernel_cache(workdir, pip_args=[])
    assert len(compiled) == 3
    monkeypatch.setattr(kernel_cache, "_kernel_sources_sha256", lambda: "0" * 64)  # a kernel source edited
    kernel_cache.build_kernel_cache(workdir, pip_args=[])
    kernel_cache.build_kernel_cache(workdir, pip_args=[])
    assert len(compiled) == 4
    monkeypatch.setattr(kernel_cache.toolchain, "tool_version", lambda path: "Cuda compilation tools, release 13.1")
    kernel_cache.build_kernel_cache(workdir, pip_args=[])  # the same toolkit path, another nvcc
    assert len(compiled) == 5
    manifest = json.loads((workdir.kernel_cache / "MANIFEST.json").read_text())
    assert manifest["cuda_arch_list"] == "9.0 12.0" and manifest["freetoken"] == importlib.metadata.version("freetoken")


def test_cuda_home_shim_is_reused_and_a_foreign_directory_is_left_alone(tmp_path: Path) -> None:
    """The shim over a PyPI-laid-out toolkit is made once and used as it is later; a directory of that
    name holding anything else is refused, its files untouched."""
    root = _toolkit(tmp_path / "nvidia" / "cu13", "nvcc")
    (root / "lib").mkdir()
    (root / "lib" / "libcudart.so.13").write_text("")
    shim = tmp_path / "work" / "cuda-home"
    assert kernel_cache._shim_cuda_home(root, shim) == shim
    assert (shim / "lib64" / "libcudart.so").resolve() == (root / "lib" / "libcudart.so.13").resolve()
    assert kernel_cache._shim_cuda_home(root, shim) == shim  # the second build: the same links, nothing rewritten
    other = tmp_path / "elsewhere" / "cuda-home"
    (other / "bin").mkdir(parents=True)
    (other / "bin" / "mine.txt").write_text("a user's file")
    with pytest.raises(OverlayError, match="is not the CUDA_HOME shim"):
        kernel_cache._shim_cuda_home(root, other)
    assert (other / "bin" / "mine.txt").read_text() == "a user's file"
