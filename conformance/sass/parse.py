"""Parsers of the texts the SASS gate reads: ``ptxas -v`` logs, cuobjdump's and nvdisasm's SASS
listings, ``cuobjdump -res-usage``, and ``cu++filt`` demangling."""

from __future__ import annotations

import contextlib
import dataclasses
import re
import shutil
import subprocess
from typing import Iterable

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
        if m := _SASS_FUNC.match(line) or _TEXT_LABEL.match(line):
            current = m.group(1)
            functions.setdefault(current, [])
            continue
        if m := _SECTION.match(line):  # a .text.<function> section starts one; any other ends it
            name = m.group(1)
            current = name[len(".text."):] if name.startswith(".text.") else None
            if current is not None:
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
    """{mangled: demangled} by ``c++filt`` (each name as it is where c++filt is missing or fails)."""
    names, cxxfilt, lines = list(names), shutil.which("c++filt"), []
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        if cxxfilt and names:
            lines = subprocess.run([cxxfilt], input="\n".join(names) + "\n", capture_output=True, text=True,
                                   timeout=60).stdout.splitlines()  # fmt: skip
    return dict(zip(names, lines)) if len(lines) == len(names) else {n: n for n in names}


def parse_syscalls(elf_text: str) -> list[str]:
    """The ``__cuda_syscall*`` driver routines an ELF dump names, sorted, once each."""
    return sorted(set(_SYSCALL.findall(elf_text)))
