"""Download the wheels an offline GPU machine needs to run every session.

The GPU machine (no network; Python 3.12 with torch 2.11 cu130, triton,
numpy, transformers, pytest, hypothesis, ... preinstalled) gets only what it
lacks: the pinned freetoken wheel (hash-checked), tvm-ffi, flashlib, pyzmq,
nox and nox's dependencies.  See CONTRIBUTING.md for how it is used there.
"""

from __future__ import annotations

import logging
import re
import shutil
import sys
import tempfile
from pathlib import Path

from .pin import Pin
from .requirements import (
    GPU_PREINSTALLED,
    GPU_PYTHON,
    GPU_WHEELS_NO_DEPS,
    WHEELHOUSE_MAX_BYTES,
    gpu_wheels_with_deps,
)
from .upstream import fetch_wheel
from .util import OverlayError, Workdir, run_checked

logger = logging.getLogger(__name__)

# manylinux tags the GPU machine (glibc 2.39) accepts, newest first.
_PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_24_x86_64",
              "manylinux_2_17_x86_64", "manylinux2014_x86_64", "linux_x86_64")  # fmt: skip


def project_name(wheel: Path) -> str:
    """Normalized project name of a wheel file (``PyYAML-6.0-...`` -> ``pyyaml``)."""
    return re.sub(r"[-_.]+", "-", wheel.name.split("-")[0]).lower()


def _pip_download(requirements: tuple[str, ...], dest: Path, python_version: str, *, deps: bool) -> None:
    cmd = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "--disable-pip-version-check",
           "--python-version", python_version, "--implementation", "cp", "-d", str(dest)]  # fmt: skip
    for platform in _PLATFORMS:
        cmd += ["--platform", platform]
    if not deps:
        cmd.append("--no-deps")
    run_checked([*cmd, *requirements], what="pip download")


def download_wheelhouse(dest: Path, pin: Pin, *, workdir: Workdir, python_version: str = GPU_PYTHON) -> list[Path]:
    """Fill ``dest`` with the wheels the GPU machine lacks; the wheels written."""
    if not re.fullmatch(r"3\.\d+", python_version):
        raise OverlayError(f"--python-version {python_version!r}: expected 3.N (e.g. {GPU_PYTHON})")
    py_tag = "cp" + python_version.replace(".", "")
    if dest.exists() and not dest.is_dir():
        raise OverlayError(f"wheelhouse DIR {str(dest)!r}: exists and is not a directory; name a new or existing directory")
    try:
        dest.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OverlayError(f"wheelhouse DIR {str(dest)!r}: cannot create it ({exc.strerror})") from None

    freetoken = fetch_wheel(pin, pin.wheel_name(py_tag), cache=workdir.wheels)
    wheels = [Path(shutil.copy2(freetoken, dest / freetoken.name))]
    with tempfile.TemporaryDirectory(prefix="ft-wheelhouse-") as tmp:
        _pip_download(gpu_wheels_with_deps(), Path(tmp), python_version, deps=True)
        _pip_download(GPU_WHEELS_NO_DEPS, Path(tmp), python_version, deps=False)
        for wheel in sorted(Path(tmp).glob("*.whl")):
            if project_name(wheel) in GPU_PREINSTALLED:
                logger.info(f"skipping {wheel.name} (the GPU machine has {project_name(wheel)})")
                continue
            wheels.append(Path(shutil.move(wheel, dest / wheel.name)))

    total = sum(w.stat().st_size for w in wheels)
    for wheel in wheels:
        logger.info(f"{wheel.stat().st_size / 2**20:7.2f} MiB  {wheel.name}")
    logger.info(f"wheelhouse {dest}: {len(wheels)} wheels, {total / 2**20:.1f} MiB")
    if total > WHEELHOUSE_MAX_BYTES:
        raise OverlayError(
            f"wheelhouse {dest} is {total / 2**20:.1f} MiB, over the {WHEELHOUSE_MAX_BYTES / 2**20:.0f} MiB budget"
        )
    return wheels
