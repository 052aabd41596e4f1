"""The SASS report model (:class:`SassReport` per arch, :class:`FunctionReport` per kernel: bulk
copies, absolute calls, local memory, stack, spills, registers) and the scans that build it
(compile, disassemble, parse)."""

from __future__ import annotations

import concurrent.futures
import dataclasses
import os
import pathlib
from collections import Counter
from typing import Iterable, Sequence

from conformance.sass.build import Disassembler, compile_cubin, require_disassembler, require_nvcc, tool_version
from conformance.sass.parse import PtxasStats, demangle, parse_ptxas, parse_res_usage, parse_sass, parse_syscalls


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
        name = self.demangled.removeprefix("void ")
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
        return {"name": self.name, "demangled": self.demangled, "registers": self.registers,
                "stack_frame_bytes": self.stack_frame_bytes, "spill_store_bytes": self.spill_store_bytes,
                "spill_load_bytes": self.spill_load_bytes, "smem_bytes": self.smem_bytes,
                "instructions": self.instructions, "ublkcp": len(self.ublkcp),
                "ublkcp_opcodes": sorted({s.opcode for s in self.ublkcp}), "calls": [str(s) for s in self.calls],
                "call_abs_noinc": [str(s) for s in self.call_abs_noinc], "local_loads": self.local_loads,
                "local_stores": self.local_stores, "res_usage": self.res_usage}  # fmt: skip


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

    def find(self, substring: str) -> list[FunctionReport]:
        return [f for f in self.functions if substring in f.name]

    def record(self, full: bool = False) -> dict:
        """The report as JSON: what ``results/sass.json`` keeps (the source's file name and nvcc's flags; no machine
        paths, no compile times: two runs on one toolchain write the same bytes) or, ``full``, with the source's
        and the cubin's paths, nvcc's command and the ptxas log (``--out``); each function's opcode counts last."""
        flags = [a for a in self.command[1:-3] if not a.startswith("-I")]  # less nvcc, includes, source -o cubin
        where = ({"cubin": self.cubin, "command": self.command, "ptxas_log": self.ptxas_log} if full
                 else {"nvcc_flags": flags})  # fmt: skip
        return {"arch": f"sm_{self.arch}", "source": self.source if full else pathlib.Path(self.source).name,
                "nvcc": self.nvcc_version, "disassembler": f"{self.disassembler} ({self.disassembler_version})",
                "has_ublkcp": self.has_ublkcp, "call_abs_noinc": [str(s) for s in self.call_abs_noinc_sites],
                "calls": [str(s) for s in self.call_sites], "syscalls": self.syscalls, "ldl_stl": self.ldl_stl_count,
                "max_stack_frame_bytes": self.max_stack_frame_bytes, "spill_bytes": self.spill_bytes,
                "functions": [f.summary() for f in self.functions], **where,
                "opcodes": {f.name: f.opcodes for f in self.functions}}  # fmt: skip


def scan_cubin(cubin: str | os.PathLike, arch: int, ptxas_log: str, disassembler: Disassembler, *, source: str = "",
               command: Sequence[str] = (), nvcc_version: str = "") -> SassReport:  # fmt: skip
    """Disassemble ``cubin`` and merge the SASS with ``ptxas_log`` into a :class:`SassReport`."""
    sass = parse_sass(disassembler.sass(cubin))
    stats = parse_ptxas(ptxas_log)
    usage_text = disassembler.res_usage(cubin)
    usage = parse_res_usage(usage_text) if usage_text is not None else None
    syscalls = parse_syscalls(disassembler.elf(cubin))
    names = demangle(sass)
    functions = []
    for name, insns in sass.items():
        of = {base: [i for i in insns if _base(i.opcode) == base] for base in ("UBLKCP", "CALL", "LDL", "STL")}
        sites = {base: [Site(name, i.offset, i.opcode, i.text) for i in of[base]] for base in ("UBLKCP", "CALL")}
        functions.append(FunctionReport(
            name=name, demangled=names.get(name, name),
            **dataclasses.asdict(stats.get(name, PtxasStats())),  # entry, registers, stack, spills, smem: ptxas -v
            instructions=len(insns), opcodes=dict(sorted(Counter(i.opcode for i in insns).items())),
            ublkcp=sites["UBLKCP"], calls=sites["CALL"], local_loads=len(of["LDL"]), local_stores=len(of["STL"]),
            res_usage=None if usage is None else usage.get(name)))  # fmt: skip
    return SassReport(arch=arch, source=str(source), cubin=str(cubin), command=list(command), nvcc_version=nvcc_version,
                      disassembler=disassembler.kind, disassembler_version=disassembler.version(), functions=functions,
                      syscalls=syscalls, ptxas_log=ptxas_log)  # fmt: skip


def scan(source: str | os.PathLike, arch: int, out_dir: str | os.PathLike, *, nvcc: str | None = None,
         disassembler: Disassembler | None = None, **compile_options) -> SassReport:  # fmt: skip
    """Compile ``source`` for ``sm_<arch>`` into ``out_dir`` and scan the cubin; ``compile_options``
    (``include_dirs``, ``flags``, ``extra_flags``) go to :func:`~conformance.sass.build.compile_cubin`."""
    nvcc = nvcc or require_nvcc()
    disassembler = disassembler or require_disassembler()
    result = compile_cubin(source, arch, out_dir, nvcc=nvcc, **compile_options)
    return scan_cubin(result.cubin, arch, result.ptxas_log, disassembler, source=str(source), command=result.command,
                      nvcc_version=tool_version(nvcc))  # fmt: skip


def scan_many(source: str | os.PathLike, archs: Iterable[int], out_dir: str | os.PathLike, *, jobs: int = 2,
              **kwargs) -> dict[int, SassReport]:  # fmt: skip
    """:func:`scan` for several archs, ``jobs`` nvcc processes at a time."""
    archs = list(archs)
    out_dir = pathlib.Path(out_dir)
    with concurrent.futures.ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futures = {a: pool.submit(scan, source, a, out_dir / f"sm_{a}", **kwargs) for a in archs}
        return {a: futures[a].result() for a in archs}


def format_table(reports: Iterable[SassReport]) -> str:
    """One line per (arch, kernel): registers, stack, spills, local accesses, bulk copies, calls, smem."""
    header = ("arch", "function", "regs", "stack", "spill", "LDL/STL", "UBLKCP", "CALL.ABS.NOINC", "calls", "smem")
    rows = [header] + [tuple(map(str, (f"sm_{r.arch}", f.short_name, f.registers, f.stack_frame_bytes, f.spill_bytes,
                                        f.local_accesses, len(f.ublkcp), len(f.call_abs_noinc), len(f.calls),
                                        f.smem_bytes))) for r in reports for f in r.functions]  # fmt: skip
    widths = [max(len(row[i]) for row in rows) for i in range(len(header))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(lines)
