"""The CUDA runtime, through cupy's ``cupy.cuda.runtime`` (the one path: host registration, async copies,
pointer attributes, device limits, versions). cupy is imported on the first call, so CPU-only code and
the CPU tests never need it; on the GPU machine it is preinstalled (``cupy-cuda13x``)."""

from __future__ import annotations

from typing import Any

#: ``cudaLimit`` values (cuda_runtime_api.h).
CUDA_LIMIT_STACK_SIZE = 0
CUDA_LIMIT_MALLOC_HEAP_SIZE = 2
#: ``cudaHostRegisterPortable | cudaHostRegisterMapped``: FreeToken's pin path.
HOST_REGISTER_PORTABLE_MAPPED = 1 | 2
#: ``cudaMemcpyHostToDevice``.
MEMCPY_HOST_TO_DEVICE = 1


def runtime():
    """``cupy.cuda.runtime``, or a RuntimeError that says what to install."""
    try:
        from cupy.cuda import runtime as rt
    except ImportError as e:
        raise RuntimeError(f"the CUDA runtime is reached through cupy, which is not importable ({e}); install the "
                           "cupy wheel of the CUDA major torch was built for (e.g. pip install cupy-cuda13x)") from e
    return rt


def _call(what: str, fn, *args):
    try:
        return fn(*args)
    except Exception as e:  # cupy's CUDARuntimeError names the CUDA error
        raise RuntimeError(f"{what} failed: {e}") from e


def host_register(base: int, nbytes: int, what: str = "") -> None:
    """``cudaHostRegister(PORTABLE | MAPPED)`` of ``nbytes`` at ``base`` (FreeToken's pin path), or raise."""
    if nbytes <= 0:
        raise ValueError(f"nbytes={nbytes}: cudaHostRegister needs at least one byte")
    _call(f"cudaHostRegister({nbytes} B{', ' + what if what else ''})", runtime().hostRegister, base, nbytes,
          HOST_REGISTER_PORTABLE_MAPPED)  # fmt: skip


def host_unregister(base: int) -> None:
    """``cudaHostUnregister`` of a :func:`host_register`-ed ``base`` (the caller has synchronized)."""
    _call("cudaHostUnregister", runtime().hostUnregister, base)


def device_pointer(host_ptr: int) -> int:
    """The device address of registered host memory at ``host_ptr`` (``cudaPointerGetAttributes``)."""
    return int(_call("cudaPointerGetAttributes", runtime().pointerGetAttributes, host_ptr).devicePointer)


def memcpy_h2d_async(dst: int, src: int, nbytes: int, stream: int) -> None:
    """``cudaMemcpyAsync`` host->device on ``stream`` (capturable into a CUDA graph as a memcpy node)."""
    _call("cudaMemcpyAsync", runtime().memcpyAsync, dst, src, nbytes, MEMCPY_HOST_TO_DEVICE, stream)


def device_limit(limit: int = CUDA_LIMIT_STACK_SIZE) -> int:
    """``cudaDeviceGetLimit`` of the current device."""
    if limit not in (CUDA_LIMIT_STACK_SIZE, CUDA_LIMIT_MALLOC_HEAP_SIZE):
        raise ValueError(f"limit={limit!r}: expected CUDA_LIMIT_STACK_SIZE (0) or CUDA_LIMIT_MALLOC_HEAP_SIZE (2)")
    return int(_call(f"cudaDeviceGetLimit({limit})", runtime().deviceGetLimit, limit))


def _version(v: int) -> str:
    return f"{v // 1000}.{(v % 1000) // 10}"


def versions() -> dict[str, Any]:
    """``{"cuda_runtime": "13.0", "cuda_driver_api": "13.0"}`` (empty where cupy is missing)."""
    try:
        rt = runtime()
    except RuntimeError:
        return {}
    return {"cuda_runtime": _version(rt.runtimeGetVersion()), "cuda_driver_api": _version(rt.driverGetVersion())}
