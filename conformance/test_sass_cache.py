"""The SASS tests' nvcc cache (conformance.sass.build.compile_cubin's ``cache``): a cubin is taken from it only for
the very inputs nvcc built it from; a change to any of them (a header the source includes, a flag, the arch, the
nvcc, nvcc's environment) compiles again, and that compile's cubin is the one scanned."""

from __future__ import annotations

import pathlib

import pytest

from conformance.sass.build import compile_cubin

pytestmark = pytest.mark.integration  # nvcc runs

SOURCE = '#include "ring.h"\n__global__ void k(int *out) { out[threadIdx.x] = RING * threadIdx.x; }\n'


def _nvcc_reporting(tmp_path: pathlib.Path, nvcc: str, extra_version_line: str) -> str:
    """A wrapper of ``nvcc`` whose ``--version`` says one line more (another build of the same compiler)."""
    wrapper = tmp_path / "nvcc"
    wrapper.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then "{nvcc}" --version; echo "{extra_version_line}"; '
                       f'exit 0; fi\nexec "{nvcc}" "$@"\n')  # fmt: skip
    wrapper.chmod(0o755)
    return str(wrapper)


def test_the_cache_gives_back_what_nvcc_built_and_a_changed_input_recompiles(nvcc, tmp_path, monkeypatch):
    cache, src = tmp_path / "cache", tmp_path / "src"
    src.mkdir()
    (src / "k.cu").write_text(SOURCE)
    (src / "ring.h").write_text("#define RING 3\n")
    runs = iter(range(100))

    def build(**kw):
        kw = {"nvcc": nvcc, "flags": ("-O3",), "include_dirs": [str(src)], "cache": cache, **kw}
        return compile_cubin(src / "k.cu", kw.pop("arch", 90), tmp_path / f"out{next(runs)}", **kw)

    first = build()
    assert not first.cached and "Compiling entry function" in first.ptxas_log
    again = build()
    assert again.cached and again.cubin != first.cubin, "the second build did not come from the cache"
    assert again.cubin.read_bytes() == first.cubin.read_bytes() and again.ptxas_log == first.ptxas_log

    (src / "ring.h").write_text("#define RING 5\n")  # an included header: not on the command line
    header = build()
    assert not header.cached and header.cubin.read_bytes() != first.cubin.read_bytes()
    uncached = compile_cubin(src / "k.cu", 90, tmp_path / "fresh", nvcc=nvcc, flags=("-O3",), include_dirs=[str(src)])
    assert header.cubin.read_bytes() == uncached.cubin.read_bytes()  # what is scanned is what nvcc builds now
    assert build().cached

    assert not build(flags=("-O1",)).cached
    assert not build(arch=120).cached
    assert not build(nvcc=_nvcc_reporting(tmp_path, nvcc, "Build another_0")).cached
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-maxrregcount=16")
    assert not build().cached
    monkeypatch.delenv("NVCC_APPEND_FLAGS")
    assert build().cached  # back to the inputs of the header build
