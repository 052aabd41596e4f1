"""Compile a ``.cu`` for one GPU arch, disassemble the cubin, and report what its SASS holds.

The report (:class:`SassReport`, one per arch, with a :class:`FunctionReport` per kernel)
answers the questions the decode_gather conformance tier asks of the machine code:

* does it use the bulk-copy engine (``UBLKCP``),
* does it call out of the kernel (``CALL.ABS.NOINC`` is a call into a driver routine; the
  ``.shared::cluster`` bulk-copy form lowers to one on sm_120, and its first launch raises the
  context's per-thread stack limit for good),
* does it touch local memory (``LDL``/``STL``), and
* its stack frame, spills and registers, as ``ptxas -v`` prints them (cross-checked against
  ``cuobjdump -res-usage`` where cuobjdump is the disassembler).

Used by the tests (``conformance/test_sass.py``) and as a script by the build/report steps::

    python -m conformance.sass --arch 90 --out /tmp/sass_sm90.json  # the full reports
    python -m conformance.sass --arch 80,90,100,120 --save --check  # results/sass.json; exit 1 on a violation
    python -m conformance.sass --source my.cu --arch 120 -I include/

Without ``--source`` it scans FreeToken's decode_gather kernel, found through the installed
``freetoken`` package, instantiated with the default ring of
``freetoken.kernel.decode_gather.default_ring()``.

Tools: nvcc and a disassembler, cuobjdump preferred, nvdisasm as a fallback, found by
``freetoken_overlay.toolchain`` (one search order for every caller).

Long (~800 lines) because one module holds everything that knows the formats involved: the
nvcc/ptxas invocation, two disassemblers' output, ``ptxas -v`` and ``-res-usage`` parsing, the report
model and its CLI; split, each format's knowledge would be spread over files.
"""

from __future__ import annotations

import argparse
import ast
import concurrent.futures
import dataclasses
import json
import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from typing import Iterable, Sequence

DEFAULT_ARCHS = (80, 90, 100, 120)
# freetoken.kernel.utils.DEFAULT_CUDA_CFLAGS of 0.2.1; the installed package's own value wins
# (read from its source by upstream_cuda_cflags(), without importing torch and triton).
FALLBACK_CUDA_CFLAGS = ("-std=c++20", "-O3", "--expt-relaxed-constexpr")
# The kernel's JIT wrapper, as freetoken.kernel.utils._make_wrapper writes it.
DECODE_GATHER_EXPORT = "launch"

from freetoken_overlay.toolchain import (  # noqa: E402  (the one home of the tool finders)
    DISASSEMBLER_INSTALL_HINT,
    ToolNotFound,
    find_tool,
    package_dirs,
    require_nvcc,
    tool_version,
)


class CompileError(RuntimeError):
    """nvcc failed; the message holds its command line and output."""


# --------------------------------------------------------------------------------------------
# locating tools and sources
# --------------------------------------------------------------------------------------------


_package_dirs = package_dirs  # the freetoken lookups below go through this name (tests replace it)


@dataclasses.dataclass(frozen=True)
class Disassembler:
    """cuobjdump (sass, elf, res-usage) or nvdisasm (sass with sections; no res-usage)."""

    kind: str  # "cuobjdump" | "nvdisasm"
    path: str

    def _run(self, *args: str) -> str:
        proc = subprocess.run([self.path, *args], capture_output=True, text=True, timeout=300)
        if proc.returncode != 0:
            raise RuntimeError(
                f"{self.kind} failed ({proc.returncode}): {' '.join([self.path, *args])}\n{proc.stdout}\n{proc.stderr}"
            )
        return proc.stdout

    def sass(self, cubin: str | os.PathLike) -> str:
        if self.kind == "cuobjdump":
            return self._run("-sass", str(cubin))
        return self._run(str(cubin))

    def elf(self, cubin: str | os.PathLike) -> str:
        """Text holding the ELF's symbols and relocations (where syscall externs show)."""
        if self.kind == "cuobjdump":
            return self._run("-elf", str(cubin))
        return self._run(str(cubin))

    def res_usage(self, cubin: str | os.PathLike) -> str | None:
        if self.kind == "cuobjdump":
            return self._run("-res-usage", str(cubin))
        return None

    def version(self) -> str:
        return tool_version(self.path)


def find_disassembler() -> Disassembler | None:
    """cuobjdump if any is found, else nvdisasm, else None."""
    cuobjdump = find_tool("cuobjdump")
    if cuobjdump:
        return Disassembler("cuobjdump", cuobjdump)
    nvdisasm = find_tool("nvdisasm")
    if nvdisasm:
        return Disassembler("nvdisasm", nvdisasm)
    return None


def require_disassembler() -> Disassembler:
    found = find_disassembler()
    if found is None:
        raise ToolNotFound(DISASSEMBLER_INSTALL_HINT)
    return found


def freetoken_dir() -> pathlib.Path | None:
    """The installed ``freetoken`` package's directory, found without importing it."""
    dirs = _package_dirs("freetoken")
    return dirs[0] if dirs else None


def decode_gather_header() -> pathlib.Path:
    """``<freetoken>/kernel/csrc/jit/decode_gather.cuh``; ``LookupError`` names what is missing."""
    root = freetoken_dir()
    if root is None:
        raise LookupError("the freetoken package is not installed (no importlib spec for 'freetoken')")
    cuh = root / "kernel" / "csrc" / "jit" / "decode_gather.cuh"
    if not cuh.is_file():
        raise LookupError(
            f"freetoken at {root} has no kernel/csrc/jit/decode_gather.cuh: the patched freetoken "
            "(with the decode_gather kernel) is not the one installed"
        )
    return cuh


def freetoken_include_dir() -> pathlib.Path:
    root = freetoken_dir()
    if root is None:
        raise LookupError("the freetoken package is not installed (no importlib spec for 'freetoken')")
    inc = root / "kernel" / "csrc" / "include"
    if not (inc / "freetoken").is_dir():
        raise LookupError(f"freetoken at {root} has no kernel/csrc/include/freetoken")
    return inc


def tvm_ffi_include_dirs() -> list[str]:
    """tvm-ffi's include paths (tvm_ffi.libinfo.include_paths()) plus its dlpack include."""
    try:
        from tvm_ffi import libinfo
    except ImportError as exc:
        raise LookupError(f"apache-tvm-ffi is not importable ({exc}): pip install apache-tvm-ffi") from exc
    dirs = list(libinfo.include_paths())
    try:
        dlpack = libinfo.find_dlpack_include_path()
    except (AttributeError, RuntimeError):
        dlpack = None
    if dlpack and dlpack not in dirs:
        dirs.append(dlpack)
    if not any((pathlib.Path(d) / "tvm" / "ffi").is_dir() for d in dirs):
        raise LookupError(f"tvm_ffi.libinfo.include_paths()={dirs} holds no tvm/ffi headers")
    if not any((pathlib.Path(d) / "dlpack" / "dlpack.h").is_file() for d in dirs):
        raise LookupError(f"no dlpack/dlpack.h under tvm-ffi's include paths {dirs}")
    return dirs


def decode_gather_include_dirs() -> list[str]:
    return [str(freetoken_include_dir()), *tvm_ffi_include_dirs()]


def decode_gather_default_ring() -> tuple[int, int, int]:
    """``freetoken.kernel.decode_gather.default_ring()`` (imports freetoken, hence torch)."""
    try:
        from freetoken.kernel.decode_gather import default_ring
    except ImportError as exc:
        raise LookupError(f"freetoken.kernel.decode_gather is not importable ({exc})") from exc
    ring = tuple(int(v) for v in default_ring())
    if len(ring) != 3:
        raise LookupError(f"default_ring() returned {ring!r}, expected (ctas, stages, chunk_bytes)")
    return ring  # type: ignore[return-value]


def decode_gather_source(ring: Sequence[int], header: pathlib.Path | None = None) -> str:
    """The translation unit upstream's JIT builds for one ring (load_jit's cuda_sources)."""
    header = header or decode_gather_header()
    args = ", ".join(str(int(v)) for v in ring)
    return (
        f'#include "{header.resolve()}"\n'
        f"TVM_FFI_DLL_EXPORT_TYPED_FUNC({DECODE_GATHER_EXPORT}, (&DecodeGatherKernel<{args}>::run));\n"
    )


def upstream_cuda_cflags() -> tuple[tuple[str, ...], str]:
    """(flags, where from): the installed freetoken's DEFAULT_CUDA_CFLAGS, else the 0.2.1 value."""
    root = freetoken_dir()
    utils = root / "kernel" / "utils.py" if root else None
    if utils and utils.is_file():
        try:
            tree = ast.parse(utils.read_text())
            for node in tree.body:
                if (
                    isinstance(node, ast.Assign)
                    and any(isinstance(t, ast.Name) and t.id == "DEFAULT_CUDA_CFLAGS" for t in node.targets)
                ):
                    value = ast.literal_eval(node.value)
                    return tuple(str(v) for v in value), str(utils)
        except (SyntaxError, ValueError):
            pass
    return FALLBACK_CUDA_CFLAGS, "conformance.sass.FALLBACK_CUDA_CFLAGS"


# --------------------------------------------------------------------------------------------
# compiling
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass
class CompileResult:
    cubin: pathlib.Path
    ptxas_log: str
    command: list[str]


def compile_cubin(
    source: str | os.PathLike,
    arch: int,
    out_dir: str | os.PathLike,
    *,
    include_dirs: Iterable[str] = (),
    flags: Sequence[str] | None = None,
    extra_flags: Sequence[str] = (),
    nvcc: str | None = None,
) -> CompileResult:
    """``nvcc <flags> -I... -cubin -arch=sm_<arch> -Xptxas -v <source>``; the log is ptxas's."""
    nvcc = nvcc or require_nvcc()
    source = pathlib.Path(source)
    out_dir = pathlib.Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    cubin = out_dir / f"{source.stem}.sm_{arch}.cubin"
    if flags is None:
        flags = upstream_cuda_cflags()[0]
    cmd = [
        nvcc,
        *flags,
        *extra_flags,
        *(f"-I{d}" for d in include_dirs),
        "-cubin",
        f"-arch=sm_{arch}",
        "-Xptxas",
        "-v",
        str(source),
        "-o",
        str(cubin),
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    log = proc.stdout + proc.stderr
    if proc.returncode != 0 or not cubin.is_file():
        raise CompileError(f"nvcc failed ({proc.returncode}) for sm_{arch}:\n{' '.join(cmd)}\n{log}")
    return CompileResult(cubin=cubin, ptxas_log=log, command=cmd)


# --------------------------------------------------------------------------------------------
# parsing
# --------------------------------------------------------------------------------------------

_PTXAS_ENTRY = re.compile(r"Compiling entry function '([^']+)' for '(\w+)'")
_PTXAS_PROPS = re.compile(r"Function properties for (\S+)")
_PTXAS_FRAME = re.compile(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads")
_PTXAS_USED = re.compile(r"Used (\d+) registers")
_PTXAS_SMEM = re.compile(r"(\d+) bytes smem")

_SASS_FUNC = re.compile(r"^\s*Function\s*:\s*(\S+)\s*$")  # cuobjdump -sass
_SECTION = re.compile(r"^\s*\.section\s+([^\s,]+)")  # nvdisasm
_TEXT_LABEL = re.compile(r"^\.text\.(\S+):\s*$")  # nvdisasm
_INSN = re.compile(r"^\s*/\*([0-9a-fA-F]{4,})\*/\s+([^;]*?)\s*;")
_PRED = re.compile(r"^@!?U?P(?:T|\d+)\s+")
_RES_FUNC = re.compile(r"^\s*Function\s+(\S+):\s*$")
_RES_KV = re.compile(r"([A-Z_]+(?:\[\d+\])?):(\d+)")
_SYSCALL = re.compile(r"\b(__cuda_syscall\w*)")


@dataclasses.dataclass
class PtxasStats:
    entry: bool = False
    registers: int | None = None
    stack_frame_bytes: int | None = None
    spill_store_bytes: int | None = None
    spill_load_bytes: int | None = None
    smem_bytes: int | None = None


def parse_ptxas(log: str) -> dict[str, PtxasStats]:
    """Per function (mangled name): what ``ptxas -v`` printed about it."""
    stats: dict[str, PtxasStats] = {}
    entry: str | None = None  # the entry function the next "Used N registers" belongs to
    props: str | None = None  # the function the next "N bytes stack frame" belongs to
    for line in log.splitlines():
        if m := _PTXAS_ENTRY.search(line):
            entry = m.group(1)
            stats.setdefault(entry, PtxasStats()).entry = True
            continue
        if m := _PTXAS_PROPS.search(line):
            props = m.group(1)
            stats.setdefault(props, PtxasStats())
            continue
        if (m := _PTXAS_FRAME.search(line)) and props is not None:
            s = stats[props]
            s.stack_frame_bytes, s.spill_store_bytes, s.spill_load_bytes = (int(g) for g in m.groups())
            props = None
            continue
        if (m := _PTXAS_USED.search(line)) and entry is not None:
            s = stats[entry]
            s.registers = int(m.group(1))
            if sm := _PTXAS_SMEM.search(line):
                s.smem_bytes = int(sm.group(1))
            entry = None
    return stats


@dataclasses.dataclass
class Instruction:
    offset: int
    predicate: str
    opcode: str  # with modifiers, e.g. "UBLKCP.S.G", "CALL.ABS.NOINC"
    text: str


def parse_sass(text: str) -> dict[str, list[Instruction]]:
    """Per function: its instructions, from ``cuobjdump -sass`` or ``nvdisasm`` output."""
    functions: dict[str, list[Instruction]] = {}
    current: str | None = None
    for line in text.splitlines():
        if m := _SASS_FUNC.match(line):
            current = m.group(1)
            functions.setdefault(current, [])
            continue
        if m := _SECTION.match(line):
            name = m.group(1)
            current = name[len(".text."):] if name.startswith(".text.") else None
            if current is not None:
                functions.setdefault(current, [])
            continue
        if m := _TEXT_LABEL.match(line):
            current = m.group(1)
            functions.setdefault(current, [])
            continue
        if current is None:
            continue
        if m := _INSN.match(line):
            body = m.group(2).strip()
            pred = ""
            if p := _PRED.match(body):
                pred = p.group(0).strip()
                body = body[p.end():]
            if not body or body.startswith("."):
                continue  # an assembler directive, not an instruction
            opcode = body.split()[0]
            functions[current].append(Instruction(int(m.group(1), 16), pred, opcode, m.group(2).strip()))
    return functions


def parse_res_usage(text: str) -> dict[str, dict[str, int]]:
    """Per function: ``cuobjdump -res-usage``'s REG, STACK, SHARED, LOCAL, ..."""
    usage: dict[str, dict[str, int]] = {}
    current: str | None = None
    for line in text.splitlines():
        if m := _RES_FUNC.match(line):
            current = m.group(1)
            continue
        if current is not None and "REG:" in line:
            usage[current] = {k: int(v) for k, v in _RES_KV.findall(line)}
            current = None
    return usage


def demangle(names: Iterable[str]) -> dict[str, str]:
    names = list(names)
    cxxfilt = shutil.which("c++filt")
    if not cxxfilt or not names:
        return {n: n for n in names}
    try:
        out = subprocess.run([cxxfilt], input="\n".join(names) + "\n", capture_output=True, text=True, timeout=60)
        lines = out.stdout.splitlines()
    except (OSError, subprocess.SubprocessError):
        return {n: n for n in names}
    if len(lines) != len(names):
        return {n: n for n in names}
    return dict(zip(names, lines))


# --------------------------------------------------------------------------------------------
# reports
# --------------------------------------------------------------------------------------------


def _base(opcode: str) -> str:
    return opcode.split(".", 1)[0]


@dataclasses.dataclass
class Site:
    function: str
    offset: int
    opcode: str
    text: str

    def __str__(self) -> str:
        return f"{self.function}+{self.offset:#06x}: {self.text}"


@dataclasses.dataclass
class FunctionReport:
    name: str
    demangled: str
    entry: bool
    registers: int | None
    stack_frame_bytes: int | None
    spill_store_bytes: int | None
    spill_load_bytes: int | None
    smem_bytes: int | None
    instructions: int
    opcodes: dict[str, int]
    ublkcp: list[Site]
    calls: list[Site]
    local_loads: int  # LDL*
    local_stores: int  # STL*
    res_usage: dict[str, int] | None

    @property
    def call_abs_noinc(self) -> list[Site]:
        return [s for s in self.calls if s.opcode.startswith("CALL.ABS.NOINC")]

    @property
    def spill_bytes(self) -> int | None:
        if self.spill_store_bytes is None or self.spill_load_bytes is None:
            return None
        return self.spill_store_bytes + self.spill_load_bytes

    @property
    def local_accesses(self) -> int:
        return self.local_loads + self.local_stores

    def count(self, opcode_prefix: str) -> int:
        """Instructions whose opcode (with modifiers) starts with ``opcode_prefix``."""
        return sum(n for op, n in self.opcodes.items() if op.startswith(opcode_prefix))

    @property
    def short_name(self) -> str:
        name = self.demangled
        if name.startswith("void "):
            name = name[5:]
        depth = 0
        for i, ch in enumerate(name):  # drop the parameter list: "f<...>(params)" -> "f<...>"
            if ch == "<":
                depth += 1
            elif ch == ">":
                depth -= 1
            elif ch == "(" and depth == 0:
                return name[:i]
        return name

    def summary(self) -> dict:
        return {
            "name": self.name,
            "demangled": self.demangled,
            "registers": self.registers,
            "stack_frame_bytes": self.stack_frame_bytes,
            "spill_store_bytes": self.spill_store_bytes,
            "spill_load_bytes": self.spill_load_bytes,
            "smem_bytes": self.smem_bytes,
            "instructions": self.instructions,
            "ublkcp": len(self.ublkcp),
            "ublkcp_opcodes": sorted({s.opcode for s in self.ublkcp}),
            "calls": [str(s) for s in self.calls],
            "call_abs_noinc": [str(s) for s in self.call_abs_noinc],
            "local_loads": self.local_loads,
            "local_stores": self.local_stores,
            "res_usage": self.res_usage,
        }


@dataclasses.dataclass
class SassReport:
    arch: int
    source: str
    cubin: str
    command: list[str]
    nvcc_version: str
    disassembler: str
    disassembler_version: str
    functions: list[FunctionReport]
    syscalls: list[str]
    ptxas_log: str

    @property
    def has_ublkcp(self) -> bool:
        return any(f.ublkcp for f in self.functions)

    @property
    def call_sites(self) -> list[Site]:
        return [s for f in self.functions for s in f.calls]

    @property
    def call_abs_noinc_sites(self) -> list[Site]:
        return [s for f in self.functions for s in f.call_abs_noinc]

    @property
    def ldl_stl_count(self) -> int:
        return sum(f.local_accesses for f in self.functions)

    @property
    def max_stack_frame_bytes(self) -> int | None:
        frames = [f.stack_frame_bytes for f in self.functions]
        return None if not frames or any(v is None for v in frames) else max(frames)  # type: ignore[type-var]

    @property
    def spill_bytes(self) -> int | None:
        spills = [f.spill_bytes for f in self.functions]
        return None if not spills or any(v is None for v in spills) else sum(spills)  # type: ignore[arg-type]

    @property
    def registers(self) -> dict[str, int | None]:
        return {f.name: f.registers for f in self.functions}

    def find(self, substring: str) -> list[FunctionReport]:
        return [f for f in self.functions if substring in f.name]

    def summary(self) -> dict:
        return {
            "arch": f"sm_{self.arch}",
            "source": self.source,
            "nvcc": self.nvcc_version,
            "disassembler": f"{self.disassembler} ({self.disassembler_version})",
            "has_ublkcp": self.has_ublkcp,
            "call_abs_noinc": [str(s) for s in self.call_abs_noinc_sites],
            "calls": [str(s) for s in self.call_sites],
            "syscalls": self.syscalls,
            "ldl_stl": self.ldl_stl_count,
            "max_stack_frame_bytes": self.max_stack_frame_bytes,
            "spill_bytes": self.spill_bytes,
            "functions": [f.summary() for f in self.functions],
        }

    def record(self) -> dict:
        """What ``results/sass.json`` keeps: :meth:`summary`, the source's file name, nvcc's flags and the
        opcode counts; no machine paths, no compile times (two runs on one toolchain write the same bytes)."""
        flags = [a for a in self.command[1:-3] if not a.startswith("-I")]  # less nvcc, includes, source -o cubin
        opcodes = {f.name: f.opcodes for f in self.functions}
        return {**self.summary(), "source": pathlib.Path(self.source).name, "nvcc_flags": flags, "opcodes": opcodes}

    def to_dict(self) -> dict:
        out = self.summary()
        out.update(
            cubin=self.cubin,
            command=self.command,
            ptxas_log=self.ptxas_log,
            opcodes={f.name: f.opcodes for f in self.functions},
        )
        return out


def scan_cubin(
    cubin: str | os.PathLike,
    arch: int,
    ptxas_log: str,
    disassembler: Disassembler,
    *,
    source: str = "",
    command: Sequence[str] = (),
    nvcc_version: str = "",
) -> SassReport:
    """Disassemble ``cubin`` and merge the SASS with ``ptxas_log`` into a :class:`SassReport`."""
    sass = parse_sass(disassembler.sass(cubin))
    stats = parse_ptxas(ptxas_log)
    usage_text = disassembler.res_usage(cubin)
    usage = parse_res_usage(usage_text) if usage_text is not None else None
    syscalls = sorted(set(_SYSCALL.findall(disassembler.elf(cubin))))
    names = demangle(sass)
    functions = []
    for name, insns in sass.items():
        st = stats.get(name, PtxasStats())
        opcodes = Counter(i.opcode for i in insns)
        functions.append(
            FunctionReport(
                name=name,
                demangled=names.get(name, name),
                entry=st.entry,
                registers=st.registers,
                stack_frame_bytes=st.stack_frame_bytes,
                spill_store_bytes=st.spill_store_bytes,
                spill_load_bytes=st.spill_load_bytes,
                smem_bytes=st.smem_bytes,
                instructions=len(insns),
                opcodes=dict(sorted(opcodes.items())),
                ublkcp=[Site(name, i.offset, i.opcode, i.text) for i in insns if _base(i.opcode) == "UBLKCP"],
                calls=[Site(name, i.offset, i.opcode, i.text) for i in insns if _base(i.opcode) == "CALL"],
                local_loads=sum(1 for i in insns if _base(i.opcode) == "LDL"),
                local_stores=sum(1 for i in insns if _base(i.opcode) == "STL"),
                res_usage=None if usage is None else usage.get(name),
            )
        )
    return SassReport(
        arch=arch,
        source=str(source),
        cubin=str(cubin),
        command=list(command),
        nvcc_version=nvcc_version,
        disassembler=disassembler.kind,
        disassembler_version=disassembler.version(),
        functions=functions,
        syscalls=syscalls,
        ptxas_log=ptxas_log,
    )


def scan(
    source: str | os.PathLike,
    arch: int,
    out_dir: str | os.PathLike,
    *,
    include_dirs: Iterable[str] = (),
    flags: Sequence[str] | None = None,
    extra_flags: Sequence[str] = (),
    nvcc: str | None = None,
    disassembler: Disassembler | None = None,
) -> SassReport:
    """Compile ``source`` for ``sm_<arch>`` into ``out_dir`` and scan the cubin."""
    nvcc = nvcc or require_nvcc()
    disassembler = disassembler or require_disassembler()
    result = compile_cubin(
        source, arch, out_dir, include_dirs=include_dirs, flags=flags, extra_flags=extra_flags, nvcc=nvcc
    )
    return scan_cubin(
        result.cubin,
        arch,
        result.ptxas_log,
        disassembler,
        source=str(source),
        command=result.command,
        nvcc_version=tool_version(nvcc),
    )


def scan_many(
    source: str | os.PathLike,
    archs: Iterable[int],
    out_dir: str | os.PathLike,
    *,
    jobs: int = 2,
    **kwargs,
) -> dict[int, SassReport]:
    """:func:`scan` for several archs, ``jobs`` nvcc processes at a time."""
    archs = list(archs)
    out_dir = pathlib.Path(out_dir)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {a: pool.submit(scan, source, a, out_dir / f"sm_{a}", **kwargs) for a in archs}
        return {a: futures[a].result() for a in archs}


# --------------------------------------------------------------------------------------------
# what decode_gather must satisfy
# --------------------------------------------------------------------------------------------

DECODE_GATHER_INSTANTIATIONS = {
    # mangled-name fragment -> index type: both are instantiated by DecodeGatherKernel::run
    "decode_gather_kernelIi": "int32",
    "decode_gather_kernelIl": "int64",
}


def is_decode_gather(f: "FunctionReport") -> bool:
    """Whether ``f`` is one of decode_gather's kernel instantiations."""
    return any(fragment in f.name for fragment in DECODE_GATHER_INSTANTIATIONS)


def expects_ublkcp(arch: int) -> bool:
    """The bulk-copy (TMA) path is compiled for sm_90 and newer; below it the kernel is a trap stub."""
    return arch >= 90


def decode_gather_violations(report: SassReport) -> list[str]:
    """Everything in ``report`` that breaks the decode_gather SASS contract (empty: conforming)."""
    problems: list[str] = []
    arch = report.arch
    for fragment, idx in DECODE_GATHER_INSTANTIATIONS.items():
        found = report.find(fragment)
        if not found:
            problems.append(f"sm_{arch}: no {idx}-index instantiation ({fragment}...) in the cubin")
        for f in found:
            if f.instructions == 0:
                problems.append(f"sm_{arch}: {f.short_name} has no instructions")
    for f in report.functions:
        # the engine contract is decode_gather's; the no-call/no-stack rules below hold for every
        # function of the module (it also compiles fast_index_copy.cuh's kernels, whose checks it shares)
        if not is_decode_gather(f):
            pass
        elif expects_ublkcp(arch):
            for op in ("UBLKCP.S.G", "UBLKCP.G.S"):
                if f.count(op) == 0:
                    problems.append(f"sm_{arch}: {f.short_name} has no {op} (bulk copy not lowered natively)")
        else:
            if f.ublkcp:
                problems.append(f"sm_{arch}: {f.short_name} has UBLKCP below sm_90")
            if not any(op.startswith("BPT.TRAP") for op in f.opcodes):
                problems.append(f"sm_{arch}: {f.short_name} does not trap (the host refuses pre-sm_90; the stub must too)")
            if f.count("LDG.E.128") or f.count("STG.E.128"):
                problems.append(f"sm_{arch}: {f.short_name} copies with LDG/STG below sm_90 (expected a trap stub)")
        for s in f.call_abs_noinc:
            problems.append(f"sm_{arch}: CALL.ABS.NOINC (driver routine call) at {s}")
        for s in f.calls:
            if s not in f.call_abs_noinc:
                problems.append(f"sm_{arch}: call at {s}")
        if f.stack_frame_bytes is None or f.registers is None or f.spill_bytes is None:
            problems.append(f"sm_{arch}: ptxas -v printed no stack/spill/register line for {f.name}")
        else:
            if f.stack_frame_bytes != 0:
                problems.append(f"sm_{arch}: {f.short_name} has a {f.stack_frame_bytes}-byte stack frame")
            if f.spill_bytes != 0:
                problems.append(
                    f"sm_{arch}: {f.short_name} spills ({f.spill_store_bytes} B stored, {f.spill_load_bytes} B loaded)"
                )
        if f.local_accesses:
            problems.append(f"sm_{arch}: {f.short_name} has {f.local_loads} LDL and {f.local_stores} STL")
    for name in report.syscalls:
        problems.append(f"sm_{arch}: the cubin references the driver routine {name}")
    return problems


# --------------------------------------------------------------------------------------------
# script
# --------------------------------------------------------------------------------------------


def format_table(reports: Iterable[SassReport]) -> str:
    header = ("arch", "function", "regs", "stack", "spill", "LDL/STL", "UBLKCP", "CALL.ABS.NOINC", "calls", "smem")
    rows = [header]
    for r in reports:
        for f in r.functions:
            rows.append(
                (
                    f"sm_{r.arch}",
                    f.short_name,
                    str(f.registers),
                    str(f.stack_frame_bytes),
                    str(f.spill_bytes),
                    str(f.local_accesses),
                    str(len(f.ublkcp)),
                    str(len(f.call_abs_noinc)),
                    str(len(f.calls)),
                    str(f.smem_bytes),
                )
            )
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)


def _parse_archs(values: list[str] | None) -> list[int]:
    if not values:
        return list(DEFAULT_ARCHS)
    archs: list[int] = []
    for value in values:
        for part in value.replace(" ", ",").split(","):
            part = part.strip().lower().removeprefix("sm_")
            if part:
                archs.append(int(part))
    return archs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.sass", description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--arch", action="append", help="sm arch(s): 90, sm_90, or 80,90,100,120 (repeatable; default: all four)")
    parser.add_argument("--source", help="a .cu to scan (default: freetoken's decode_gather kernel, default ring)")
    parser.add_argument("--ring", help="decode_gather ring CTAS,STAGES,CHUNK_BYTES (default: freetoken's default_ring())")
    parser.add_argument("-I", "--include", action="append", default=[], help="extra include directory")
    parser.add_argument("--flag", action="append", default=[], help="extra nvcc flag (repeatable)")
    parser.add_argument("--out", help="write the full reports (paths, ptxas logs) as JSON here")
    parser.add_argument("--save", action="store_true", help="record the reports as results/sass.json (suite.results)")
    parser.add_argument("--build-dir", help="keep the .cu and cubins here (default: a temporary directory)")
    parser.add_argument("--jobs", type=int, default=2, help="nvcc processes at a time (default 2)")
    parser.add_argument("--check", action="store_true", help="apply the decode_gather contract; exit 1 on a violation")
    args = parser.parse_args(argv)

    archs = _parse_archs(args.arch)
    try:
        nvcc = require_nvcc()
        disassembler = require_disassembler()
        with tempfile.TemporaryDirectory(prefix="conformance-sass-") as tmp:
            build = pathlib.Path(args.build_dir or tmp)
            build.mkdir(parents=True, exist_ok=True)
            includes = list(args.include)
            if args.source:
                source = pathlib.Path(args.source)
            else:
                ring = tuple(int(v) for v in args.ring.split(",")) if args.ring else decode_gather_default_ring()
                source = build / "decode_gather_{}x{}x{}.cu".format(*ring)
                source.write_text(decode_gather_source(ring))
                includes = decode_gather_include_dirs() + includes
            reports = scan_many(
                source, archs, build, jobs=args.jobs, include_dirs=includes, extra_flags=args.flag,
                nvcc=nvcc, disassembler=disassembler,
            )
    except (ToolNotFound, LookupError, CompileError) as exc:
        print(f"conformance.sass: {exc}", file=sys.stderr)
        return 2
    ordered = [reports[a] for a in archs]
    print(format_table(ordered))
    if args.out:
        out = pathlib.Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"reports": [r.to_dict() for r in ordered]}, indent=2) + "\n")
        print(f"wrote {out}")
    if args.save:
        from suite import results
        from gpukit.geometry import Ring

        ring = None if args.source else Ring(*ring)._asdict()
        print(f"wrote {results.save('sass', ring=ring, reports=[r.record() for r in ordered])}")
    if args.check:
        problems = [p for r in ordered for p in decode_gather_violations(r)]
        for p in problems:
            print(f"VIOLATION {p}", file=sys.stderr)
        if problems:
            return 1
        print(f"decode_gather SASS contract: OK on {', '.join(f'sm_{a}' for a in archs)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
