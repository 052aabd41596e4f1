"""One fresh-process run of FreeToken's engine: load, warm up, decode, measure, write one JSON.

The harness starts it with the switch set or unset; it reports which copy kernel the cache chose, and refuses
a run whose choice does not match the request (a silent fallback is never timed as ``tma``). The engine is
``freetoken.llm.LLM``, the ``Scheduler`` ``ft serve`` runs, in-process for what HTTP does not expose (the
token ids, the cache's miss counters), with ``ft serve --moe-strategy offload``'s settings at batch 1.

Method: one warm-up generation of another prompt, then ``skip + tokens + 1`` greedy tokens, every token's
arrival stamped on the host. A prefill borrows ``2 x experts`` slots as staging, so the first ``skip`` tokens
refill the cache and are left out: tokens/s is ``tokens / (t[skip + tokens] - t[skip])``, and the cache's
counters are zeroed (on the engine stream) when token ``skip`` arrives, so misses cover the same window.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from suite.kernels import SWITCH_ENV, TMA_KERNEL, UPSTREAM_KERNEL, Kernel, Launch, launched


class RunFailed(RuntimeError):
    """A run failed: a worker process (the message carries the tail of its log) or a round in this process."""


#: The fixed prompt (any tokenizer encodes it; ~90 tokens on a BPE vocabulary, ~480 bytes).
PROMPT = (
    "The mixture-of-experts layer routes every token to a handful of experts out of hundreds. When the "
    "experts live in host memory, each decode step copies the ones it misses over PCIe into a cache of "
    "slots on the GPU before the grouped matrix products run. Explain, step by step, how the size of that "
    "cache, the skew of expert popularity and the bandwidth of the link decide how many tokens per second "
    "a single stream can decode, and what changes when the copy kernel moves the same bytes faster."
)
#: The warm-up prompt: shares no prefix with PROMPT.
WARMUP_PROMPT = "0 1 1 2 3 5 8 13 21 34 55 89 144 233 377 610 987 1597 2584 4181 6765 10946 17711 28657 46368"
WARMUP_TOKENS = 24
#: quantiles of the measured window's inter-token intervals recorded per run
STEP_QUANTILES = (("p10", 0.1), ("p50", 0.5), ("p90", 0.9))


def ids_sha256(ids: list[int]) -> str:
    """sha256 of the generated ids written as decimal numbers joined by commas."""
    return hashlib.sha256(",".join(str(int(i)) for i in ids).encode()).hexdigest()


def checkpoint_num_experts(model: str) -> int:
    cfg = json.loads((Path(model) / "config.json").read_text())
    text = cfg.get("text_config") or cfg
    n = int(text.get("num_experts") or 0)
    if n <= 0:
        raise ValueError(f"{model}/config.json: num_experts={n}: not a MoE checkpoint; the A/B needs routed experts")
    return n


def engine_kwargs(args: argparse.Namespace, num_experts: int) -> dict[str, Any]:
    """``LLM(...)`` keyword arguments: ``ft serve``'s offload settings at batch 1 (see the docstring)."""
    from freetoken.mm.config import ENCODER_KINDS, MultimodalConfig

    return {
        "moe_strategy": "offload",
        "moe_cache_size": args.slots,
        # the double-buffered prefill needs 2 x experts slots; below that the engine must not ask for it
        "moe_prefill_overlap": args.slots >= 2 * num_experts,
        "moe_collect_stats": True, "max_running_req": 1, "cuda_graph_max_bs": 1,
        "num_token_override": args.kv_tokens, "max_seq_len_override": args.kv_tokens,
        # the status reporter would zero the counters every N decode steps (its stats line)
        "decode_log_interval": 1 << 30,
        "mm": MultimodalConfig(disabled_encoders=frozenset(ENCODER_KINDS)),
    }


def copy_launch(cache) -> Launch:
    """The kernel and launch shape of ``cache``'s decode miss copy, from its launcher (``_decode_miss_copy``,
    chosen once in ``_build_copy_plan``: upstream's at its grid, the ring, or auto's pick)."""
    return launched(getattr(cache, "_decode_miss_copy", None), getattr(cache, "_copy_blocks_per_bank", None))


def copy_kernel(cache) -> str:
    """Which kernel ``copy_missing`` runs for decode misses in this cache."""
    if copy_launch(cache).kernel is Kernel.TMA:
        return TMA_KERNEL
    if getattr(cache, "_copy_fused_ok", False):
        return UPSTREAM_KERNEL
    return "fast_index_copy (per bank)"


def copy_grid(cache) -> dict[str, Any]:
    """The launch shape of the decode miss copy: decode_gather's ring, or upstream's CTAs per bank."""
    return copy_launch(cache).grid


def expected_kernel(env_value: str | None) -> str | None:
    """The kernel the switch at ``env_value`` must run; None for ``auto``, whose pick (ft bench bw's profile) may be
    either."""
    if env_value and env_value.strip().lower() == Kernel.AUTO:
        return None
    return TMA_KERNEL if env_value else UPSTREAM_KERNEL


def _timed_llm(torch: Any, LLM: Any, DetokenizeMsg: Any) -> type:
    """An LLM class that stamps every token's arrival and zeroes the cache counters at the window start."""

    class TimedLLM(LLM):
        def __init__(self, *a: Any, **kw: Any) -> None:
            super().__init__(*a, **kw)
            self.stamps: list[float] = []
            self.reset_at: int | None = None

        def offline_send_result(self, reply):
            now = time.perf_counter()
            for msg in reply:
                if isinstance(msg, DetokenizeMsg):
                    self.stamps.append(now)
                    if self.reset_at is not None and len(self.stamps) == self.reset_at + 1:
                        with torch.cuda.stream(self.engine.stream):
                            self.engine.moe_offload_cache.reset_stats()
            super().offline_send_result(reply)

    return TimedLLM


def _load(args: argparse.Namespace, torch: Any, **extra: Any) -> tuple[Any, Any, str | None]:
    """(llm, its offload cache, $FREETOKEN_DECODE_GATHER), refusing an engine that would not measure the kernel
    its switch asks for or has no batch-1 graph; ``extra``: more ``LLM(...)`` arguments."""
    from freetoken.llm import LLM
    from freetoken.message import DetokenizeMsg

    num_experts = checkpoint_num_experts(args.model)
    if args.slots < num_experts:
        raise ValueError(f"--slots {args.slots}: the offload cache needs at least num_experts={num_experts} slots")
    env_gather = os.environ.get(SWITCH_ENV) or None
    llm = _timed_llm(torch, LLM, DetokenizeMsg)(args.model, **engine_kwargs(args, num_experts), **extra)
    cache = llm.engine.moe_offload_cache
    if cache is None:
        raise RuntimeError("the engine built no MoE offload cache: --moe-strategy offload did not take")
    kernel = copy_kernel(cache)
    if expected_kernel(env_gather) not in (None, kernel):
        raise RuntimeError(
            f"{SWITCH_ENV}={env_gather!r} should copy decode misses with {expected_kernel(env_gather)}, "
            f"but the cache chose {kernel} (see FreeToken's warning above); this run would not measure that kernel"
        )
    graph_bs = list(getattr(llm.engine.graph_runner, "graph_bs_list", []) or [])
    if 1 not in graph_bs:
        raise RuntimeError(f"no batch-1 CUDA graph was captured (graph batch sizes {graph_bs}); decode would run eager")
    return llm, cache, env_gather


def _generate(llm: Any, args: argparse.Namespace, torch: Any) -> tuple[list[int], list[float], float]:
    """(token ids, arrival stamps, the time generation started) of the timed prompt, after a warm-up one."""
    from freetoken.core import SamplingParams

    greedy = {"temperature": 0.0, "ignore_eos": True}
    llm.generate([WARMUP_PROMPT], SamplingParams(max_tokens=WARMUP_TOKENS, **greedy))
    torch.cuda.synchronize()
    llm.stamps = []
    llm.reset_at = args.skip
    n_total = args.skip + args.tokens + 1
    t_gen = time.perf_counter()
    out = llm.generate([PROMPT], SamplingParams(max_tokens=n_total, **greedy))[0]
    torch.cuda.synchronize()
    ids = [int(i) for i in out["token_ids"]]
    if len(llm.stamps) < n_total or len(ids) < n_total:
        raise RuntimeError(f"asked for {n_total} tokens, got {len(ids)} ids and {len(llm.stamps)} stamps")
    return ids, llm.stamps, t_gen


def _timing(args: argparse.Namespace, stamps: list[float], t_gen: float) -> dict[str, Any]:
    """The timed window's tokens/s and inter-token intervals, and the whole generation's."""
    window = stamps[args.skip : args.skip + args.tokens + 1]
    steps_ms = sorted((b - a) * 1e3 for a, b in zip(window, window[1:]))
    return {
        "tokens_per_s": args.tokens / (window[-1] - window[0]),
        # the window's inter-token intervals: a uniformly slower run moves p50, host hiccups move p90/max
        "step_ms": {q: steps_ms[min(len(steps_ms) - 1, int(f * len(steps_ms)))] for q, f in STEP_QUANTILES},
        "step_ms_max": steps_ms[-1],
        "ttft_s": stamps[0] - t_gen,
        "decode_s_all": stamps[-1] - stamps[0],
        "tokens_per_s_all": (len(stamps) - 1) / (stamps[-1] - stamps[0]),
    }


def measure(llm: Any, cache: Any, args: argparse.Namespace, torch: Any, generated: tuple) -> dict[str, Any]:
    """One generation's record: the cache's copy kernel and counters, timing, ids and memory
    (``generated``: what :func:`_generate` returned)."""
    ids, stamps, t_gen = generated
    stats = cache.decode_miss_stats()
    layers = cache.num_layers
    free, total = torch.cuda.mem_get_info()
    return {
        "copy_kernel": copy_kernel(cache), "fused_copy_plan": bool(getattr(cache, "_copy_fused_ok", False)),
        "copy_grid": copy_grid(cache), "slots": args.slots, "moe_layers": layers,
        "num_experts": cache.num_experts, "prefill_overlap": bool(cache.prefill_overlap),
        "graph_bs": list(getattr(llm.engine.graph_runner, "graph_bs_list", []) or []),
        "prompt_tokens": len(llm.tokenizer.encode(PROMPT)), "generated_tokens": len(ids), "skip": args.skip,
        "tokens": args.tokens, **_timing(args, stamps, t_gen),
        "misses_per_token": stats["missing_per_layer"] * layers, "miss_rate": stats["miss_rate"],
        "active_per_token": stats["active_per_layer"] * layers, "layer_calls": stats["layer_calls"],
        "misses_total": round(stats["missing_per_layer"] * stats["layer_calls"]),
        "ids_sha256": ids_sha256(ids), "ids_head": ids[:16],
        "vram_peak_reserved_bytes": torch.cuda.max_memory_reserved(),
        "vram_peak_allocated_bytes": torch.cuda.max_memory_allocated(), "vram_device_used_bytes": total - free,
    }  # fmt: skip


def run(args: argparse.Namespace) -> dict[str, Any]:
    t_start = time.perf_counter()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local checkpoint; never wait on the network
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch

    from gpukit.decode_step import auto_pick

    llm, cache, env_gather = _load(args, torch)
    t_loaded = time.perf_counter()
    generated = _generate(llm, args, torch)
    result = {"kernel_env": env_gather, "auto": auto_pick(cache), **measure(llm, cache, args, torch, generated),
              "load_s": t_loaded - t_start}
    if args.machine:  # nvidia-smi, nvcc, git: a second or two, asked once per session
        from gpukit.machine import machine_info

        result["machine"] = machine_info()
    result["process_s"] = time.perf_counter() - t_start
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.e2e worker", description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--slots", type=int, required=True)
    ap.add_argument("--tokens", type=int, required=True)
    ap.add_argument("--skip", type=int, required=True)
    ap.add_argument("--kv-tokens", type=int, required=True)
    ap.add_argument("--result", required=True, help="JSON file to write")
    ap.add_argument("--machine", action="store_true", help="add gpukit's machine facts to the result")
    args = ap.parse_args(argv)
    code = 0
    try:
        result = run(args)
        Path(args.result).write_text(json.dumps(result, default=str) + "\n")
    except BaseException:  # noqa: BLE001 -- reported, then the process ends without teardown
        traceback.print_exc()
        code = 3
    sys.stdout.flush()
    sys.stderr.flush()
    # skip interpreter teardown: the engine's pinned banks, graphs, threads and process group are the
    # OS's to reclaim, and a teardown that hangs would cost the next run its GPU
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit("run it as: python -m bench.e2e worker ... (started by python -m bench.e2e run)")
