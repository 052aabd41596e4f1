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

The package, one job a module: ``build`` (tools, sources, the nvcc call), ``parse`` (ptxas logs,
SASS listings, resource usage), ``report`` (the report model and the scans), ``contract`` (what
decode_gather must satisfy) and ``__main__`` (this command). Its public names are importable from
``conformance.sass`` itself.
"""

from conformance.sass.build import (
    DECODE_GATHER_EXPORT,
    DEFAULT_ARCHS,
    FALLBACK_CUDA_CFLAGS,
    CompileError,
    CompileResult,
    Disassembler,
    compile_cubin,
    decode_gather_default_ring,
    decode_gather_prebuilt_rings,
    decode_gather_header,
    decode_gather_include_dirs,
    decode_gather_source,
    find_disassembler,
    freetoken_dir,
    freetoken_include_dir,
    require_disassembler,
    tvm_ffi_include_dirs,
    upstream_cuda_cflags,
)
from conformance.sass.contract import (
    DECODE_GATHER_INSTANTIATIONS,
    decode_gather_violations,
    expects_ublkcp,
    is_decode_gather,
)
from conformance.sass.parse import (
    Instruction,
    PtxasStats,
    demangle,
    parse_ptxas,
    parse_res_usage,
    parse_sass,
    parse_syscalls,
)
from conformance.sass.report import FunctionReport, SassReport, Site, format_table, scan, scan_cubin, scan_many

__all__ = [
    "CompileError",
    "CompileResult",
    "DECODE_GATHER_EXPORT",
    "DECODE_GATHER_INSTANTIATIONS",
    "DEFAULT_ARCHS",
    "Disassembler",
    "FALLBACK_CUDA_CFLAGS",
    "FunctionReport",
    "Instruction",
    "PtxasStats",
    "SassReport",
    "Site",
    "compile_cubin",
    "decode_gather_default_ring",
    "decode_gather_prebuilt_rings",
    "decode_gather_header",
    "decode_gather_include_dirs",
    "decode_gather_source",
    "decode_gather_violations",
    "demangle",
    "expects_ublkcp",
    "find_disassembler",
    "format_table",
    "freetoken_dir",
    "freetoken_include_dir",
    "is_decode_gather",
    "parse_ptxas",
    "parse_res_usage",
    "parse_sass",
    "parse_syscalls",
    "require_disassembler",
    "scan",
    "scan_cubin",
    "scan_many",
    "tvm_ffi_include_dirs",
    "upstream_cuda_cflags",
]
