"""The requirements the sessions install besides pyproject.toml's dependency groups (those are read there).

freetoken itself is always installed ``--no-deps``: its Requires-Dist asks for
``torch>=2.14,<2.15`` (from PyPI a multi-GB CUDA build), torchvision, fastapi,
openai, modelscope, ... none of which the paths the series touches import.
Instead the sessions install the explicit import closure of
``freetoken.moe.offload_cache``, ``freetoken.kernel.fast_index_copy`` and
``freetoken.kernel.aot`` (the JIT/AOT kernel path), found by importing those
modules in an empty virtual environment with freetoken ``--no-deps`` and adding
what was missing until they imported.

The closure is exercised with torch 2.11 (the GPU machine's cu130 build) to
2.14; on CPU machines the sessions install :data:`TORCH_CPU`, a CPU build that
lies on this workplace's disk (pip takes it from there; naming the ``+cpu``
local version makes pip fail fast rather than download a CUDA build elsewhere).
The version ranges are upstream's Requires-Dist where the GPU machine's
preinstalled packages satisfy them, widened just enough where they do not
(transformers 5.17 there, upstream asks for 5.18).
"""

from __future__ import annotations

import functools
import re
import tomllib
from typing import Any

from .util import REPO_ROOT

PYPROJECT = REPO_ROOT / "pyproject.toml"


@functools.cache
def pyproject() -> dict[str, Any]:
    """The checkout's pyproject.toml, read once (for cli and this module; the noxfile reads it through nox.project)."""
    with PYPROJECT.open("rb") as f:
        return tomllib.load(f)


def dependency_group(name: str) -> tuple[str, ...]:
    """A PEP 735 group of pyproject.toml (plain requirements; the groups here include none)."""
    return tuple(pyproject()["dependency-groups"][name])


#: CPU torch for machines without a GPU (skipped when reusing a machine's torch).
TORCH_CPU = "torch==2.13.0+cpu"

#: The import closure of freetoken's offload-cache and JIT paths (besides torch).
IMPORT_CLOSURE = (
    "apache-tvm-ffi==0.1.13.post3",  # freetoken.kernel.* (tvm_ffi, its JIT builder)
    "triton>=3.6,<3.9",  # flashlib.kernels, freetoken.moe.offload_cache
    "numpy>=2.0,<3",
    "tqdm>=4.66,<5",
    "huggingface_hub>=1.5,<2",  # freetoken.utils.hf
    "transformers>=5.17,<5.19",  # freetoken.utils.hf
    "msgpack>=1.1,<2",  # freetoken.utils.mp
    "pyzmq>=27,<28",  # freetoken.utils.mp
)

#: Their metadata asks for torch, which would make pip's resolver pull a CUDA torch on a
#: machine without one: installed ``--no-deps`` wherever torch is not named (a reused torch,
#: ``nox --no-venv``).  Where the sessions install :data:`TORCH_CPU` they go in the same pip
#: run as it and the closure, which holds the rest of flashlib's requirements (triton, numpy, tqdm).
NO_DEPS = ("flashlib==0.4.0",)  # freetoken.moe.offload_cache (flashlib.kernels.slot_cache)

#: NVIDIA's compiler from PyPI, for ``build`` where no CUDA toolkit is found, and the runtime
#: library (libcudart) the kernels link against; ``{major}`` is the torch CUDA major (13 for the
#: GPU machine's cu130).
NVCC_FROM_PYPI = ("nvidia-cuda-nvcc=={major}.*", "nvidia-cuda-cccl=={major}.*", "nvidia-cuda-runtime=={major}.*")

# ----------------------------------------------------------------- offline GPU machine

#: Python of the offline GPU machine.
GPU_PYTHON = "3.12"

#: Downloaded for the GPU machine without their dependencies: freetoken (the
#: pinned wheel, hash-checked) and the NO_DEPS packages.
GPU_WHEELS_NO_DEPS = (*NO_DEPS,)

def gpu_wheels_with_deps() -> tuple[str, ...]:
    """Downloaded for the GPU machine with their dependencies, of which only those not in
    :data:`GPU_PREINSTALLED` are kept: the closure's packages it lacks, nox, and pyproject.toml's
    ``sweep`` group (the heatmap)."""
    closure = tuple(r for r in IMPORT_CLOSURE if requirement_name(r) not in GPU_PREINSTALLED)
    return (*closure, "nox", *dependency_group("sweep"))


def requirement_name(requirement: str) -> str:
    """The normalized project name of a requirement (``huggingface_hub>=1.5`` -> ``huggingface-hub``)."""
    return re.sub(r"[-_.]+", "-", re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0]).lower()


#: Distributions the GPU machine's python3 (3.12, torch 2.11 cu130) already has
#: that the sessions use (from the device documentation's package list); the
#: wheelhouse leaves them out and the sessions reuse them (FT_OVERLAY_SYSTEM_SITE=1).
GPU_PREINSTALLED = frozenset({
    "attrs", "certifi", "charset-normalizer", "click", "colorama", "einops", "filelock", "fsspec", "hf-xet", "httpcore",
    "httpx", "huggingface-hub", "humanize", "hypothesis", "idna", "iniconfig", "jinja2", "markupsafe", "msgpack",
    "ninja", "numpy", "packaging", "pillow", "pluggy", "py-cpuinfo", "pygments", "pytest", "pytest-benchmark", "pyyaml",
    "regex", "requests", "safetensors", "setuptools", "shellingham", "sortedcontainers", "tokenizers", "torch", "tqdm",
    "transformers", "triton", "typer", "typing-extensions", "urllib3", "wheel"})  # fmt: skip

#: The wheelhouse must stay small enough to carry to the GPU machine.
WHEELHOUSE_MAX_BYTES = 50 * 1024 * 1024
