"""The SASS tests' cache (the ``cache`` of conformance.sass.build's compile_cubin and Disassembler): a cubin is taken
from it only for the very inputs nvcc built it from; a change to any of them (a header the source includes, a flag, the
arch, the nvcc, nvcc's environment) compiles again, and that compile's cubin is the one scanned.  A listing likewise,
by the cubin's bytes, the arguments and the disassembler's version."""

from __future__ import annotations

import pathlib

import pytest

from conformance.sass.build import Disassembler, compile_cubin

pytestmark = pytest.mark.integration  # nvcc and cuobjdump run

SOURCE = '#include "ring.h"\n__global__ void k(int *out) { out[threadIdx.x] = RING * threadIdx.x; }\n'


def _wrapper(where: pathlib.Path, tool: str, extra_version_line: str = "") -> str:
    """``tool`` behind a script that logs each call but ``--version`` to ``where/calls``; its ``--version`` says
    ``extra_version_line`` more (another build of the same tool)."""
    where.mkdir()
    script = where / pathlib.Path(tool).name
    script.write_text(f'#!/bin/sh\nif [ "$1" = --version ]; then "{tool}" --version; echo "{extra_version_line}"; '
                      f'exit 0; fi\necho "$@" >> "{where / "calls"}"\nexec "{tool}" "$@"\n')  # fmt: skip
    script.chmod(0o755)
    return str(script)


def _calls(tool: str) -> int:
    log = pathlib.Path(tool).parent / "calls"
    return len(log.read_text().splitlines()) if log.exists() else 0


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
    assert not build(nvcc=_wrapper(tmp_path / "other-nvcc", nvcc, "Build another_0")).cached
    monkeypatch.setenv("NVCC_APPEND_FLAGS", "-maxrregcount=16")
    assert not build().cached
    monkeypatch.delenv("NVCC_APPEND_FLAGS")
    assert build().cached  # back to the inputs of the header build


def test_a_listing_is_kept_by_the_cubin_the_arguments_and_the_disassembler_version(nvcc, disassembler, tmp_path):
    """Through ``elf`` (cuobjdump -elf; nvdisasm's one listing): ``-sass`` takes cuobjdump 0.4 s even for one kernel."""
    (tmp_path / "k.cu").write_text(SOURCE)
    (tmp_path / "ring.h").write_text("")  # RING from the command line
    cubins = [compile_cubin(tmp_path / "k.cu", 90, tmp_path / f"out{r}", nvcc=nvcc, flags=(f"-DRING={r}",)).cubin
              for r in (3, 5)]  # fmt: skip
    tool = _wrapper(tmp_path / "tool", disassembler.path)
    cached = Disassembler(disassembler.kind, tool, cache=tmp_path / "cache")
    listing = cached.elf(cubins[0])
    assert listing == Disassembler(disassembler.kind, disassembler.path).elf(cubins[0]) and _calls(tool) == 1
    assert cached.elf(cubins[0]) == listing and _calls(tool) == 1  # from the cache
    assert cached.elf(cubins[1]) != listing and _calls(tool) == 2  # another cubin
    if disassembler.kind == "cuobjdump":
        assert cached.res_usage(cubins[0]) != listing and _calls(tool) == 3  # other arguments
    other = _wrapper(tmp_path / "other-tool", disassembler.path, "Build another_0")
    assert Disassembler(disassembler.kind, other, cache=tmp_path / "cache").elf(cubins[0]) == listing
    assert _calls(other) == 1  # another version of the tool
