"""The GPU harness shared by ``conformance/`` and ``bench/`` (neither imports the other).

Modules, bottom up (none imports torch or freetoken at import time, so the report and the CPU
tests use them anywhere):

- ``geometry``: model, NVFP4 banks, rings, edge-case rows, byte formatting
- ``stats``: paired-round statistics (speedup, A/A spread, verdict); ``rounds``: the paired-rounds runner
- ``results``: where results go (kinds, ``results/<device>/`` paths, the device slug, provenance,
  the writer and reader)
- ``cudart``: CUDA runtime/driver through ctypes; ``machine``: machine facts; ``skips``: why a GPU
  path cannot run
- ``memory``: pinned banks, slot caches, miss lists, reference checks
- ``kernels``: kernel handles, JIT builds (extra kernels welcome), launch counter
- ``timing``: device timing, copy-engine ceiling
- ``routing``: Zipf routing traces, LRU model; ``decode_step``: the captured decode step;
  ``decode_regime``: per-layer timings as a decode step meets them (full-footprint banks, a new miss
  list before every replay)
- ``commands``: every command the docs, the report and nox print
"""
