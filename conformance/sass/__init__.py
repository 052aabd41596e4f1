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
decode_gather must satisfy) and ``__main__`` (this command); callers import from the module that holds
the name.
"""
