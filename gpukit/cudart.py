"""The CUDA runtime and driver through ctypes (the same libraries torch loaded): versions, limits, async copies."""

from __future__ import annotations

import ctypes
import functools
from typing import Any


def _loaded_library(fragment: str) -> str | None:
    try:
        with open("/proc/self/maps") as f:
            for line in f:
                if fragment in line:
                    path = line.split()[-1]
                    if path.startswith("/"):
                        return path
    except OSError:
        pass
    return None


@functools.lru_cache(maxsize=1)
def cudart() -> ctypes.CDLL | None:
    """torch's libcudart (found in /proc/self/maps), else the first loadable one."""
    import torch

    torch.cuda.init()
    candidates = [_loaded_library("libcudart.so")] + ["libcudart.so", "libcudart.so.13", "libcudart.so.12"]
    for c in candidates:
        if not c:
            continue
        try:
            lib = ctypes.CDLL(c)
        except OSError:
            continue
        lib.cudaGetErrorString.restype = ctypes.c_char_p
        lib.cudaMemcpyAsync.argtypes = [
            ctypes.c_void_p,
            ctypes.c_void_p,
            ctypes.c_size_t,
            ctypes.c_int,
            ctypes.c_void_p,
        ]
        lib.cudaDeviceGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
        lib.cudaMalloc.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_size_t]
        lib.cudaFree.argtypes = [ctypes.c_void_p]
        lib.cudaHostGetDevicePointer.argtypes = [ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p, ctypes.c_uint]
        return lib
    return None


@functools.lru_cache(maxsize=1)
def libcuda() -> ctypes.CDLL | None:
    try:
        lib = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return None
    lib.cuCtxGetLimit.argtypes = [ctypes.POINTER(ctypes.c_size_t), ctypes.c_int]
    lib.cuMemcpyHtoDAsync_v2.argtypes = [ctypes.c_uint64, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_void_p]
    return lib


def _cuda_check(lib: ctypes.CDLL, err: int, what: str) -> None:
    if err != 0:
        try:
            msg = lib.cudaGetErrorString(err).decode()
        except Exception:
            msg = f"error {err}"
        raise RuntimeError(f"{what} failed: {msg} ({err})")


def cuda_runtime_versions() -> dict[str, Any]:
    out: dict[str, Any] = {}
    lib = cudart()
    if lib is None:
        return out
    v = ctypes.c_int(0)
    if lib.cudaRuntimeGetVersion(ctypes.byref(v)) == 0:
        out["cuda_runtime"] = f"{v.value // 1000}.{(v.value % 1000) // 10}"
    if lib.cudaDriverGetVersion(ctypes.byref(v)) == 0:
        out["cuda_driver_api"] = f"{v.value // 1000}.{(v.value % 1000) // 10}"
    return out


CUDA_LIMIT_STACK_SIZE = 0
CUDA_LIMIT_MALLOC_HEAP_SIZE = 2


def device_limit(limit: int = CUDA_LIMIT_STACK_SIZE) -> tuple[int, str]:
    """cudaDeviceGetLimit of the current device, through torch's libcudart, else cupy, else the driver."""
    value = ctypes.c_size_t(0)
    lib = cudart()
    if lib is not None and lib.cudaDeviceGetLimit(ctypes.byref(value), limit) == 0:
        return int(value.value), "cudart"
    try:
        import cupy

        return int(cupy.cuda.runtime.deviceGetLimit(limit)), "cupy"
    except Exception:
        pass
    drv = libcuda()
    if drv is not None and drv.cuCtxGetLimit(ctypes.byref(value), limit) == 0:
        return int(value.value), "driver"
    raise RuntimeError("no way to read the CUDA device limit (libcudart, cupy, libcuda all failed)")


def memcpy_h2d_async(dst: int, src: int, nbytes: int, stream: int) -> None:
    """cudaMemcpyAsync host->device on ``stream`` (capturable into a CUDA graph as a memcpy node)."""
    lib = cudart()
    if lib is not None:
        _cuda_check(lib, lib.cudaMemcpyAsync(dst, src, nbytes, 1, stream), "cudaMemcpyAsync")
        return
    drv = libcuda()
    if drv is None:
        raise RuntimeError("neither libcudart nor libcuda is loadable")
    err = drv.cuMemcpyHtoDAsync_v2(dst, src, nbytes, stream)
    if err != 0:
        raise RuntimeError(f"cuMemcpyHtoDAsync failed ({err})")
