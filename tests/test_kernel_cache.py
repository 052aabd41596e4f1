"""CPU tests of freetoken_overlay/kernel_cache.py: the series' specs, an AOT kernel built without a GPU (and, on a GPU,
the kernel cache loads)."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from freetoken_overlay import kernel_cache
from freetoken_overlay.util import Workdir


def test_kernel_specs_are_selected_by_prefix() -> None:
    pytest.importorskip("freetoken.kernel.aot", reason="needs the patched freetoken (nox -s test)")
    assert kernel_cache.SPEC_PREFIX == "freetoken__decode_gather"
    assert all(name.startswith(kernel_cache.SPEC_PREFIX) for name in kernel_cache.select_specs())
    flag = "freetoken__fast_index_copy_update_flag"
    assert kernel_cache.select_specs(flag) == [flag]


@pytest.mark.integration
def test_aot_kernel_builds_without_gpu(tmp_path: Path) -> None:
    pytest.importorskip("freetoken.kernel.aot", reason="needs the patched freetoken (nox -s test)")
    if shutil.which("ninja") is None:
        pytest.skip("no ninja on PATH (the build session installs it)")
    home = kernel_cache.find_cuda_home(Workdir(tmp_path))
    if home is None:
        pytest.skip("no CUDA toolkit (nvcc) here; `nox -s build` would install one from PyPI")
    from freetoken.kernel.aot import compile_and_package_kernels

    env = {"CUDA_HOME": str(home), kernel_cache.CUDA_ARCH_LIST_ENV: "9.0"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        built = compile_and_package_kernels(
            out_dir=tmp_path / "cache", build_dir=tmp_path / "build", specs=["freetoken__fast_index_copy_update_flag"]
        )
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert [p.name for p in built] == ["freetoken__fast_index_copy_update_flag.so"]


@pytest.mark.gpu
def test_kernel_cache_loads_on_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cache = Workdir.from_env().kernel_cache
    built = sorted(cache.glob("*/*.so"))
    if not built:
        pytest.skip(f"no kernel cache at {cache} (run `nox -s build`; the series may add no kernels yet)")
    import tvm_ffi

    for path in built:
        assert tvm_ffi.load_module(str(path)) is not None
