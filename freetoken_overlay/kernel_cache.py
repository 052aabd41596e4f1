"""Build the series' AOT kernel-cache entries with upstream's own packager.

Runs in an environment where the patched freetoken and its import closure are
installed (the nox ``build`` session); it needs no GPU: the kernels are
compiled with nvcc for every architecture in $TVM_FFI_CUDA_ARCH_LIST.

Which kernels: the specs of ``freetoken.kernel.aot.default_kernel_specs()``
whose name starts with :data:`SPEC_PREFIX`, i.e. those the series adds; with
``FT_OVERLAY_KERNEL_SET=full`` also upstream's ``fast_index_copy_multi`` widths (what the
series' tests and ``auto`` load, so they run under FREETOKEN_DISABLE_JIT=1; the GPU sessions
build this set).  The cache goes to ``<workdir>/kernel-cache/`` (one ``<name>/<name>.so`` per spec,
the layout FREETOKEN_KERNEL_CACHE_DIR expects) with a ``MANIFEST.json``.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from . import toolchain
from .requirements import NVCC_FROM_PYPI
from .util import OverlayError, Workdir, run_checked

logger = logging.getLogger(__name__)

#: Kernel specs of the series: names ``freetoken__decode_gather...``.
SPEC_PREFIX = "freetoken__decode_gather"
#: What ``FT_OVERLAY_KERNEL_SET=full`` adds: upstream's decode miss copy at its prebuilt widths (1024 x 8, 32, 64).
FULL_SET_PREFIX = "freetoken__fast_index_copy_multi"
KERNEL_SET_ENV = "FT_OVERLAY_KERNEL_SET"
KERNEL_SETS = ("series", "full")

CUDA_ARCH_LIST_ENV = "TVM_FFI_CUDA_ARCH_LIST"
DEFAULT_CUDA_ARCH_LIST = "8.0 9.0 10.0 12.0"
_ARCH = re.compile(r"^\d+\.\d+[af]?$")

#: CUDA major to fetch nvcc for when torch has no CUDA (a CPU torch): the GPU machine's.
DEFAULT_CUDA_MAJOR = 13


def cuda_arch_list() -> str:
    """$TVM_FFI_CUDA_ARCH_LIST (default :data:`DEFAULT_CUDA_ARCH_LIST`), validated."""
    raw = os.environ.get(CUDA_ARCH_LIST_ENV, "")
    archs = raw.split() or DEFAULT_CUDA_ARCH_LIST.split()
    if bad := [a for a in archs if not _ARCH.match(a)]:
        raise OverlayError(f"{CUDA_ARCH_LIST_ENV}={raw!r}: {', '.join(bad)} is not a CUDA architecture; allowed "
                           "values: space-separated MAJOR.MINOR, optionally with an a or f suffix (e.g. '9.0 10.0a')")
    return " ".join(archs)


def _has_cudart(root: Path) -> bool:
    return (root / "bin" / "nvcc").is_file() and (root / "lib64" / "libcudart.so").exists()


def _nvcc_top(nvcc: str) -> Path | None:
    """The toolkit root nvcc itself uses (``TOP`` of a dry run); sees through wrapper scripts."""
    with tempfile.TemporaryDirectory() as tmp:
        source = Path(tmp) / "probe.cu"
        source.write_text("")
        proc = subprocess.run([nvcc, "--dryrun", "-c", str(source), "-o", str(Path(tmp) / "probe.o")],
                              capture_output=True, text=True)  # fmt: skip
    match = re.search(r"^#\$ TOP=(.+)$", proc.stdout + proc.stderr, re.MULTILINE)
    return Path(match.group(1).strip()).resolve() if match else None


def _shim_cuda_home(root: Path, shim: Path) -> Path | None:
    """A CUDA_HOME with the layout tvm-ffi links against (``lib64/libcudart.so``), made of
    symlinks into a toolkit laid out otherwise (PyPI's ``nvidia/cuNN`` packages); None when
    ``root`` has no ``lib/libcudart.so*`` either."""
    cudart = sorted((root / "lib").glob("libcudart.so*"))
    if not cudart:
        return None
    links = {sub: root / sub for sub in ("bin", "include", "nvvm") if (root / sub).exists()}
    links["lib64/libcudart.so"] = cudart[0]
    if shim.exists() or shim.is_symlink():  # an earlier build's: used as it is, never removed or rewritten
        if all((shim / name).is_symlink() and (shim / name).readlink() == target for name, target in links.items()):
            return shim
        raise OverlayError(f"{shim} exists but is not the CUDA_HOME shim for {root} (links {', '.join(links)}): "
                           "move it aside, or set CUDA_HOME to a complete CUDA toolkit")  # fmt: skip
    (shim / "lib64").mkdir(parents=True)
    for name, target in links.items():
        (shim / name).symlink_to(target)
    return shim


def find_cuda_home(workdir: Workdir) -> Path | None:
    """A CUDA toolkit usable by tvm-ffi's builder: the root of the first nvcc in
    :mod:`freetoken_overlay.toolchain`'s order whose toolkit has cudart (a PyPI ``nvidia/cuNN``
    toolkit through a shim); None when there is none. A set $CUDA_HOME or $CUDA_PATH without
    ``bin/nvcc`` is an error, not a reason to look elsewhere."""
    for var in ("CUDA_HOME", "CUDA_PATH"):
        raw = os.environ.get(var, "").strip()
        if raw and not (Path(raw) / "bin" / "nvcc").is_file():
            raise OverlayError(f"{var}={raw!r}: no bin/nvcc there")
    try:
        candidates = list(dict.fromkeys(toolchain.tool_candidates("nvcc")))
    except toolchain.ToolNotFound as exc:
        raise OverlayError(str(exc)) from None
    for nvcc in candidates:
        for root in dict.fromkeys(p for p in (_nvcc_top(nvcc), Path(nvcc).resolve().parent.parent) if p):
            if _has_cudart(root):
                return root
            if (shim := _shim_cuda_home(root, workdir.root / "cuda-home")) is not None:
                return shim
    return None


def _torch_cuda_major() -> int | None:
    import torch

    cuda = getattr(torch.version, "cuda", None)
    return int(cuda.split(".")[0]) if cuda else None


def ensure_cuda_home(workdir: Workdir, *, pip_args: list[str]) -> Path:
    """A CUDA toolkit; where none is found, NVIDIA's compiler from PyPI is installed."""
    if (home := find_cuda_home(workdir)) is not None:
        return home
    major = _torch_cuda_major() or DEFAULT_CUDA_MAJOR
    packages = [spec.format(major=major) for spec in NVCC_FROM_PYPI]
    logger.info(f"no nvcc found (CUDA_HOME unset, none on PATH or at /usr/local/cuda); installing {' '.join(packages)}")
    try:
        run_checked([sys.executable, "-m", "pip", "install", *pip_args, *packages], what="installing nvcc from PyPI")
    except OverlayError as exc:
        raise OverlayError(f"{exc}\nmissing: nvcc (CUDA {major}.x) and libcudart; set CUDA_HOME to a CUDA {major} "
                           f"toolkit, put its nvcc on PATH, or make {' '.join(packages)} installable "
                           "(add them to the offline wheelhouse)") from None  # fmt: skip
    importlib.invalidate_caches()  # the new nvidia/ packages are looked up through importlib
    if (home := find_cuda_home(workdir)) is None:
        raise OverlayError(f"installed {' '.join(packages)} but found no nvcc in this environment")
    return home


def select_specs(prefix: str = SPEC_PREFIX) -> list[str]:
    """Names of the installed freetoken's default kernel specs starting with ``prefix``."""
    from freetoken.kernel.aot import default_kernel_specs

    return [spec.name for spec in default_kernel_specs() if spec.name.startswith(prefix)]


def kernel_set() -> str:
    """$FT_OVERLAY_KERNEL_SET: ``series`` (unset or empty, the default) or ``full``."""
    value = os.environ.get(KERNEL_SET_ENV, "").strip().lower() or "series"
    if value not in KERNEL_SETS:
        raise OverlayError(f"{KERNEL_SET_ENV}={os.environ[KERNEL_SET_ENV]!r} is not a kernel set; allowed values: "
                           f"series (the default: the series' kernels), full (and upstream's {FULL_SET_PREFIX} widths)")
    return value


def _kernel_sources_sha256() -> str:
    """sha256 over the installed freetoken's kernel package (its Python specs and CUDA sources)."""
    import freetoken.kernel

    root = Path(freetoken.kernel.__file__).parent
    h = hashlib.sha256()
    for path in sorted(p for p in root.rglob("*") if p.is_file() and p.suffix in (".py", ".cuh", ".cu", ".h", ".hpp")):
        h.update(path.relative_to(root).as_posix().encode() + b"\0" + path.read_bytes() + b"\0")
    return h.hexdigest()


def _up_to_date(out: Path, inputs: dict) -> bool:
    """Whether ``out`` holds a cache built from ``inputs`` (its specs or more: a full cache serves the
    series' set), every kernel file still as built."""
    manifest = read_manifest(out)
    if manifest is None:
        return False
    kernels = manifest.get("kernels", {})
    if {k: manifest.get(k) for k in inputs if k != "specs"} != {k: v for k, v in inputs.items() if k != "specs"}:
        return False
    if not set(inputs["specs"]) <= set(kernels) or sorted(kernels) != sorted(manifest.get("specs", [])):
        return False
    so = {name: out / name / f"{name}.so" for name in kernels}
    return all(p.is_file() and p.stat().st_size == kernels[n] for n, p in so.items())


def build_kernel_cache(workdir: Workdir, *, pip_args: list[str]) -> Path | None:
    """Build the series' kernel-cache entries; the cache directory (None: nothing to build).

    A cache already built from the same freetoken, kernel sources, architectures, toolkit (its path and
    nvcc's release) and specs is kept as it is (a second ``nox -s build`` compiles nothing); one built from all of
    these but for another freetoken version (a series change outside the kernel package) is kept, relabelled."""
    import freetoken

    archs = cuda_arch_list()
    full = kernel_set() == "full"
    names = select_specs()
    if not names:
        logger.info(f"freetoken {freetoken.__version__} has no kernel spec named {SPEC_PREFIX}* in "
                    "default_kernel_specs() (the series adds none yet); skipping the kernel cache")  # fmt: skip
        return None
    if full:
        names = [*names, *select_specs(FULL_SET_PREFIX)]
    cuda_home = ensure_cuda_home(workdir, pip_args=pip_args)
    out = workdir.kernel_cache
    inputs = {"freetoken": freetoken.__version__, "sources_sha256": _kernel_sources_sha256(),
              "cuda_arch_list": archs, "cuda_home": str(cuda_home), "specs": sorted(names),
              "nvcc": toolchain.tool_version(str(cuda_home / "bin" / "nvcc"))}  # fmt: skip
    if _up_to_date(out, inputs):
        logger.info(f"kernel cache is up to date: {out} (freetoken {freetoken.__version__}, archs {archs})")
        return out
    before = (read_manifest(out) or {}).get("freetoken")
    if _up_to_date(out, {**inputs, "freetoken": before}):  # another series, the same kernel sources: the same build
        (out / "MANIFEST.json").write_text(json.dumps({**read_manifest(out), "freetoken": freetoken.__version__},
                                                      indent=2, sort_keys=True) + "\n")  # fmt: skip
        logger.info(f"kernel cache kept: {out} was built from the same kernel sources, archs and toolkit for "
                    f"freetoken {before}; recorded for {freetoken.__version__}")  # fmt: skip
        return out
    os.environ["CUDA_HOME"] = str(cuda_home)
    os.environ[CUDA_ARCH_LIST_ENV] = archs
    logger.info(f"building {len(names)} kernel(s) for archs {archs} with {cuda_home}/bin/nvcc: {', '.join(names)}")

    from freetoken.kernel.aot import compile_and_package_kernels

    try:
        built = compile_and_package_kernels(out_dir=out, build_dir=workdir.kernel_build, specs=names, verbose=True)
    except (OSError, RuntimeError) as exc:  # a toolkit without a piece the build needs (libcudart, headers)
        raise OverlayError(f"building the kernel cache with CUDA_HOME={cuda_home} failed: {exc}\nset CUDA_HOME to a "
                           "complete CUDA toolkit (bin/nvcc, include/, lib64/libcudart.so), or remove "
                           f"{workdir.root / 'cuda-home'} and the nvidia-cuda-* packages so build installs them afresh"
                           ) from None  # fmt: skip
    manifest = {**inputs, "kernels": {p.parent.name: p.stat().st_size for p in built}}
    (out / "MANIFEST.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    for path in built:
        logger.info(f"built {path} ({path.stat().st_size} bytes)")
    logger.info(f"kernel cache: {out}  (use it with FREETOKEN_KERNEL_CACHE_DIR={out})")
    return out


def read_manifest(cache: Path) -> dict | None:
    """The ``MANIFEST.json`` of the kernel cache at ``cache``; None where there is none (or it is unreadable)."""
    try:
        manifest = json.loads((cache / "MANIFEST.json").read_text())
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def rebuild_settings(manifest: dict) -> dict[str, str]:
    """The settings that build ``manifest``'s cache again for another freetoken: its kernel set, and its
    architectures unless $TVM_FFI_CUDA_ARCH_LIST says otherwise."""
    full = any(name.startswith(FULL_SET_PREFIX) for name in manifest.get("specs", []))
    env = {KERNEL_SET_ENV: "full" if full else "series"}
    if not os.environ.get(CUDA_ARCH_LIST_ENV, "").strip() and manifest.get("cuda_arch_list"):
        env[CUDA_ARCH_LIST_ENV] = str(manifest["cuda_arch_list"])
    return env


def kernel_cache_for(cache: Path, installed: str, *, rebuild: Callable[[dict[str, str]], object],
                     log: Callable[[str], object]) -> Path | None:  # fmt: skip
    """The kernel cache at ``cache`` once it is built for freetoken ``installed``; None where there is none (a fresh
    clone: the tests that need one skip, saying so).  One built for another series (any change to patches/) is
    rebuilt first, ``rebuild(settings)`` (``build-kernels`` with :func:`rebuild_settings`): never used stale, never
    dropped quietly; still stale after that, it is an OverlayError naming the command that rebuilds it."""
    manifest = read_manifest(cache)
    if manifest is None:
        log(f"no kernel cache at {cache} (nox -s build makes it); tests that need one skip")
        return None
    if manifest.get("freetoken") != installed:
        settings = rebuild_settings(manifest)
        log(f"the kernel cache at {cache} is for freetoken {manifest.get('freetoken')}, not {installed}: "
            f"rebuilding it ({', '.join(f'{k}={v}' for k, v in settings.items())})")  # fmt: skip
        rebuild(settings)
        built_for = (read_manifest(cache) or {}).get("freetoken")
        if built_for != installed:
            raise OverlayError(f"the kernel cache at {cache} is for freetoken {built_for}, not {installed}, after "
                               "rebuilding it; run nox -s build (it says what it built)")  # fmt: skip
    log(f"FREETOKEN_KERNEL_CACHE_DIR={cache} (built for {installed})")
    return cache
