"""The GPU harness shared by ``conformance/`` and ``bench/`` (neither imports the other; their CPU-only base
is ``suite``). Bottom up, none importing torch, cupy or freetoken at import time: ``runtime`` (the CUDA
runtime through cupy), ``machine``, ``skips``; ``memory`` (pinned banks, slot caches, miss lists, reference
checks); ``kernels`` (handles, JIT builds, launch counter); ``timing``; ``routing`` (Zipf traces, LRU model);
``decode_step`` (the captured decode step); ``decode_regime`` (per-layer timings as a decode step meets them).
"""
