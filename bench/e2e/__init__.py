"""End-to-end A/B of the decode gather through FreeToken's own engine (bench/README.md): ``make-checkpoint``
(:mod:`bench.e2e.checkpoint`, the model and its routing :mod:`bench.e2e.synth`) and ``run`` (:mod:`bench.e2e.harness`,
the rounds in one engine :mod:`bench.e2e.inprocess`, one fresh-process run :mod:`bench.e2e.worker`). Nothing here
imports torch or freetoken at import time."""
