"""The GPU harness shared by ``conformance/`` and ``bench/`` (neither imports the other); its CPU-only
neighbours (results, typed result documents, geometry, stats, the paired-rounds runner, commands) are the
``suite`` package.

Modules, bottom up (none imports torch, cupy or freetoken at import time, so the report and the CPU
tests use them anywhere):

- ``runtime``: the CUDA runtime through cupy (imported on first use); ``machine``: machine facts; ``skips``: why a GPU
  path cannot run
- ``memory``: pinned banks, slot caches, miss lists, reference checks
- ``kernels``: kernel handles, JIT builds (extra kernels welcome), launch counter
- ``timing``: device timing, copy-engine ceiling
- ``routing``: Zipf routing traces, LRU model; ``decode_step``: the captured decode step;
  ``decode_regime``: per-layer timings as a decode step meets them (full-footprint banks, a new miss
  list before every replay)
"""
