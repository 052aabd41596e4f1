"""End-to-end A/B of the decode gather through FreeToken's own engine, and the offline checkpoint it runs on.

- ``python -m bench.e2e make-checkpoint DIR``: a seeded random-weight ``Qwen3_5MoeForCausalLM``
  checkpoint with ModelOpt NVFP4 experts and a local tokenizer (:mod:`bench.e2e.checkpoint`,
  the model and its routing: :mod:`bench.e2e.synth`);
- ``python -m bench.e2e run --model PATH``: tokens/s, TTFT, misses per token, VRAM and the generated
  ids' hash with ``FREETOKEN_DECODE_GATHER`` unset and ``tma``, each run a fresh process
  (:mod:`bench.e2e.harness`, one run: :mod:`bench.e2e.worker`) -> ``results/<device>/e2e.json``.

Nothing here imports torch or freetoken at import time (the CPU tests import the pure parts).
"""
