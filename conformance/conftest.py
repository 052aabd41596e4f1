"""Shared fixtures of the conformance suite: where the patched freetoken is, which tools exist.

Everything here is generic (no GPU needed); conformance/gpu/ has its own conftest on top.

A test that cannot run SKIPS with a reason naming what is missing, never passes vacuously.
With ``CONFORMANCE_STRICT=1`` in the environment a missing prerequisite FAILS instead, so a CI
job that is meant to have the toolchain cannot go green by skipping everything.
"""

from __future__ import annotations

import dataclasses
import pathlib

import pytest

from conformance.sass import build as sass
from conformance.prereq import skip_or_fail
from freetoken_overlay import toolchain
from freetoken_overlay.util import Workdir

@pytest.fixture(scope="session")
def freetoken_dir() -> pathlib.Path:
    """The installed freetoken package's directory (found without importing it)."""
    root = sass.freetoken_dir()
    if root is None:
        skip_or_fail("freetoken is not installed (no importlib spec for 'freetoken'); install the patched freetoken")
    return root


@pytest.fixture(scope="session")
def decode_gather_header(freetoken_dir: pathlib.Path) -> pathlib.Path:
    """``<freetoken>/kernel/csrc/jit/decode_gather.cuh`` of the installed (patched) package."""
    try:
        return sass.decode_gather_header()
    except LookupError as exc:
        skip_or_fail(str(exc))


@pytest.fixture(scope="session")
def decode_gather_include_dirs(freetoken_dir: pathlib.Path) -> list[str]:
    """``<freetoken>/kernel/csrc/include`` plus tvm-ffi's (and dlpack's) include directories."""
    try:
        return sass.decode_gather_include_dirs()
    except LookupError as exc:
        skip_or_fail(str(exc))


@pytest.fixture(scope="session")
def decode_gather_rings(decode_gather_header: pathlib.Path) -> tuple[tuple[int, int, int], ...]:
    """The rings the AOT cache builds into one module (``PREBUILT_RINGS``, the default among them)."""
    try:
        return sass.decode_gather_prebuilt_rings()
    except LookupError as exc:
        skip_or_fail(str(exc))


def _require(find, install_hint: str):
    """``find()``'s tool, or a skip (a failure under CONFORMANCE_STRICT) saying what to install."""
    try:
        found = find()
    except toolchain.ToolNotFound as exc:
        skip_or_fail(str(exc))
    if found is None:
        skip_or_fail(install_hint)
    return found


@pytest.fixture(scope="session")
def nvcc() -> str:
    return _require(toolchain.find_nvcc, toolchain.NVCC_INSTALL_HINT)


@pytest.fixture(scope="session")
def disassembler(sass_cache: pathlib.Path) -> sass.Disassembler:
    return dataclasses.replace(_require(sass.find_disassembler, toolchain.DISASSEMBLER_INSTALL_HINT), cache=sass_cache)


@pytest.fixture(scope="session")
def cuda_cflags() -> tuple[str, ...]:
    """The nvcc flags upstream's JIT uses (the installed freetoken's DEFAULT_CUDA_CFLAGS)."""
    return sass.upstream_cuda_cflags()[0]


@pytest.fixture(scope="session")
def sass_cache() -> pathlib.Path:
    """Where the SASS tests keep the cubins nvcc built and their listings, by their inputs (the ``cache`` of
    conformance.sass.build's compile_cubin and Disassembler): a re-run compiles and disassembles only what changed.
    ``<work dir>/sass-cache``; deleting it is always safe."""
    return Workdir.from_env().root / "sass-cache"
