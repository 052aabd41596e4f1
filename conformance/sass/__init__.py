"""Compile a ``.cu`` for one GPU arch, disassemble the cubin, and report (:class:`SassReport` per arch, a
:class:`FunctionReport` per kernel) what its SASS holds: whether it uses the bulk-copy engine (``UBLKCP``), calls
out of the kernel (``CALL.ABS.NOINC``, a driver routine: the ``.shared::cluster`` bulk-copy form lowers to one on
sm_120, and its first launch raises the context's per-thread stack limit for good) or touches local memory
(``LDL``/``STL``); its stack frame, spills and registers as ``ptxas -v`` prints them (cross-checked against
``cuobjdump -res-usage`` where cuobjdump is the disassembler). Used by ``conformance/test_sass.py`` and::

    python -m conformance.sass --arch 90 --out /tmp/sass_sm90.json  # the full reports
    python -m conformance.sass --arch 80,90,100,120 --save --check  # results/sass.json; exit 1 on a violation
    python -m conformance.sass --source my.cu --arch 120 -I include/

Without ``--source`` it scans the installed freetoken's decode_gather kernel at ``default_ring()``. nvcc and the
disassembler (cuobjdump, else nvdisasm) are found by ``freetoken_overlay.toolchain``. One job a module, callers
import from the one that holds the name: ``build`` (tools, sources, the nvcc call), ``parse`` (ptxas logs, SASS
listings, resource usage), ``report`` (the report model and the scans), ``contract`` (what decode_gather must
satisfy), ``__main__`` (this command).
"""
