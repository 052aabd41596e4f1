"""What decode_gather's machine code must satisfy on every arch (the contract ``--check`` and
``conformance/test_sass.py`` apply to a :class:`~conformance.sass.report.SassReport`)."""

from __future__ import annotations

from conformance.sass.report import FunctionReport, SassReport

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
        problems += [f"sm_{arch}: {f.short_name} has no instructions" for f in found if f.instructions == 0]
    for f in report.functions:
        # the engine contract is decode_gather's; the no-call/no-stack rules below hold for every
        # function of the module (it also compiles fast_index_copy.cuh's kernels, whose checks it shares)
        if is_decode_gather(f) and expects_ublkcp(arch):
            problems += [f"sm_{arch}: {f.short_name} has no {op} (bulk copy not lowered natively)"
                         for op in ("UBLKCP.S.G", "UBLKCP.G.S") if f.count(op) == 0]  # fmt: skip
        elif is_decode_gather(f):
            if f.ublkcp:
                problems.append(f"sm_{arch}: {f.short_name} has UBLKCP below sm_90")
            if not any(op.startswith("BPT.TRAP") for op in f.opcodes):
                problems.append(f"sm_{arch}: {f.short_name} does not trap (the host refuses pre-sm_90; the stub must too)")
            if f.count("LDG.E.128") or f.count("STG.E.128"):
                problems.append(f"sm_{arch}: {f.short_name} copies with LDG/STG below sm_90 (expected a trap stub)")
        problems += [f"sm_{arch}: CALL.ABS.NOINC (driver routine call) at {s}" for s in f.call_abs_noinc]
        problems += [f"sm_{arch}: call at {s}" for s in f.calls if s not in f.call_abs_noinc]
        if f.stack_frame_bytes is None or f.registers is None or f.spill_bytes is None:
            problems.append(f"sm_{arch}: ptxas -v printed no stack/spill/register line for {f.name}")
        else:
            if f.stack_frame_bytes != 0:
                problems.append(f"sm_{arch}: {f.short_name} has a {f.stack_frame_bytes}-byte stack frame")
            if f.spill_bytes != 0:
                spilled = f"{f.spill_store_bytes} B stored, {f.spill_load_bytes} B loaded"
                problems.append(f"sm_{arch}: {f.short_name} spills ({spilled})")
        if f.local_accesses:
            problems.append(f"sm_{arch}: {f.short_name} has {f.local_loads} LDL and {f.local_stores} STL")
    return problems + [f"sm_{arch}: the cubin references the driver routine {name}" for name in report.syscalls]
