"""The CUDA toolchain on this machine: nvcc, the disassemblers and compute-sanitizer, found in ONE order.

Every caller of a tool looks here: the SASS gate (``conformance/sass.py``), the machine facts
(``gpukit/machine.py``), the sanitizer run (``conformance/gpu/run_sanitizer.py``) and the kernel
build's toolkit root (``freetoken_overlay.kernel_cache.find_cuda_home``, the first nvcc in this order whose
toolkit has cudart). The order:

1. the tool's own variable (``$NVCC``, ``$CUOBJDUMP``, ``$NVDISASM``, ``$COMPUTE_SANITIZER``): must be
   an executable;
2. ``$CUDA_HOME/bin``, ``$CUDA_PATH/bin`` (the toolkit ``build-kernels`` compiles with);
3. ``PATH``;
4. ``/usr/local/cuda/bin``;
5. the copies shipped in wheels: Triton's ``backends/nvidia/bin``, then ``nvidia/*/bin``
   (``nvidia-cuda-nvcc``, ``nvidia-cuda-cuobjdump``: CUDA 12 ``cuda_<tool>/bin``, CUDA 13 ``cu13/bin``).

Stdlib only; nothing is imported from the packages searched.
"""

from __future__ import annotations

import importlib.util
import os
import pathlib
import subprocess
from typing import Iterator

NVCC_INSTALL_HINT = (
    "no nvcc found: set NVCC=/path/to/nvcc or CUDA_HOME, put nvcc on PATH, or install the CUDA toolkit "
    "(/usr/local/cuda/bin/nvcc; `pip install nvidia-cuda-nvcc` plus its ptxas works too)"
)
DISASSEMBLER_INSTALL_HINT = (
    "no CUDA disassembler found (cuobjdump or nvdisasm): set CUOBJDUMP=/path/to/cuobjdump, put one on "
    "PATH, or `pip install nvidia-cuda-cuobjdump` (or `pip install triton`, whose wheel ships cuobjdump "
    "and nvdisasm under triton/backends/nvidia/bin)"
)
#: The toolkit looked at after PATH.
DEFAULT_CUDA_HOME = "/usr/local/cuda"
#: {tool this module finds: the variable that names it explicitly}.
TOOL_ENV = {"nvcc": "NVCC", "cuobjdump": "CUOBJDUMP", "nvdisasm": "NVDISASM", "compute-sanitizer": "COMPUTE_SANITIZER"}


class ToolNotFound(RuntimeError):
    """A tool is missing or its variable points at nothing executable; the message says what to install."""


def executable(path: str | os.PathLike | None) -> str | None:
    if path and os.path.isfile(path) and os.access(path, os.X_OK):
        return str(path)
    return None


def package_dirs(name: str) -> list[pathlib.Path]:
    """Directories of an installed (namespace) package, found without importing it."""
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return []
    if spec is None or not spec.submodule_search_locations:
        return []
    return [pathlib.Path(p) for p in spec.submodule_search_locations]


def tool_candidates(tool: str) -> Iterator[str]:
    """Every executable ``tool`` in the module's order (duplicates included; the first is :func:`find_tool`'s).

    Raises ToolNotFound when the tool's variable is set but names no executable (a typo should not
    silently fall through to another toolkit); a set variable is the only candidate."""
    env = TOOL_ENV[tool]  # the variable that names the tool explicitly
    if explicit := os.environ.get(env):
        found = executable(explicit)
        if found is None:
            raise ToolNotFound(f"{env}={explicit!r} is not an executable file")
        yield found
        return
    dirs = [pathlib.Path(h) / "bin" for h in (os.environ.get(v, "").strip() for v in ("CUDA_HOME", "CUDA_PATH")) if h]
    dirs += [pathlib.Path(p) for p in os.environ.get("PATH", "").split(os.pathsep) if p]
    dirs.append(pathlib.Path(DEFAULT_CUDA_HOME) / "bin")
    dirs += [t / "backends" / "nvidia" / "bin" for t in package_dirs("triton")]
    for d in dirs:
        if found := executable(d / tool):
            yield found
    for nvidia_dir in package_dirs("nvidia"):
        for candidate in sorted(nvidia_dir.glob(f"*/bin/{tool}")):
            if found := executable(candidate):
                yield found


def find_tool(tool: str) -> str | None:
    """The first ``tool`` (nvcc, cuobjdump, nvdisasm, compute-sanitizer) in the module's order; None when absent."""
    return next(tool_candidates(tool), None)


def find_nvcc() -> str | None:
    return find_tool("nvcc")


def require_nvcc() -> str:
    found = find_nvcc()
    if found is None:
        raise ToolNotFound(NVCC_INSTALL_HINT)
    return found


def tool_version(path: str) -> str:
    """The ``release`` line of ``path --version`` (its last line otherwise)."""
    try:
        out = subprocess.run([path, "--version"], capture_output=True, text=True, timeout=60).stdout
    except (OSError, subprocess.SubprocessError) as exc:
        return f"unknown ({exc})"
    lines = [line.strip() for line in out.splitlines() if line.strip()]
    release = [line for line in lines if "release" in line]
    return (release or lines or ["unknown"])[-1]
