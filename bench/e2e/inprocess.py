"""The in-process A/B (``python -m bench.e2e run``'s default): one engine, one slot point, every round ``upstream``,
``tma`` and ``upstream_aa`` (the A/A control). Before every run the offload cache's decode miss launcher is set to the
kernel's (``_whole_layer_copy``, or decode_gather's ring) and the CUDA graphs are captured again, which resets the
cache: every run starts cold and must generate the same ids with the same misses. The prefix cache is off
(``cache_type="naive"``): every generation prefills its whole prompt, as a fresh process's first one does."""

from __future__ import annotations

import argparse
import functools
import logging
import os
import time
from collections.abc import Callable
from typing import Any

from bench.e2e import worker
from gpukit.machine import machine_info
from suite.kernels import RING_ENV, SWITCH_ENV, Kernel

#: the attribute of a GraphRunner that keeps its capture's arguments (:func:`record_capture_args`)
CAPTURE_ARGS = "_e2e_capture_args"
#: ``LLM(...)`` arguments of the in-process runs besides the worker's (``ft serve --cache-type naive``)
ENGINE_EXTRA = {"cache_type": "naive"}


def record_capture_args(graph_runner_cls: type) -> None:
    """Make ``graph_runner_cls._capture_graphs`` keep its arguments on its runner for :func:`recapture` (the engine
    passes them once, from its constructor: call this before the LLM is built)."""
    capture = graph_runner_cls._capture_graphs
    if getattr(capture, "records_args", False):
        return

    @functools.wraps(capture)
    def recording(self: Any, *a: Any, **kw: Any) -> Any:
        setattr(self, CAPTURE_ARGS, (a, kw))
        return capture(self, *a, **kw)

    recording.records_args = True  # type: ignore[attr-defined]
    graph_runner_cls._capture_graphs = recording


def recapture(engine: Any) -> None:
    """Capture ``engine``'s CUDA graphs again with their first capture's arguments, the attention backend's capture
    scratch and the graphs dropped first (as the engine's runtime cache rebuild does)."""
    runner = engine.graph_runner
    bs, captured = list(getattr(runner, "graph_bs_list", None) or []), getattr(runner, CAPTURE_ARGS, None)
    if 1 not in bs:
        raise RuntimeError(f"the engine has no batch-1 CUDA graph (graph batch sizes {bs}): decode would run eager")
    if captured is None:
        raise RuntimeError(f"{type(runner).__name__} kept no capture arguments: record_capture_args(GraphRunner) "
                           "must run before the LLM is built")  # fmt: skip
    engine.attn_backend.reset_capture()
    runner.destroy_cuda_graphs()
    runner._capture_graphs(*captured[0], **captured[1])
    if 1 not in runner.graph_map:
        raise RuntimeError(f"the re-capture left no batch-1 graph (captured {sorted(runner.graph_map)})")


def launchers(cache: Any, ring_launcher: Callable, ring: tuple[int, int, int]) -> dict[str, Callable]:
    """{kernel: its decode miss launcher for ``cache``}: upstream's (the cache's own, for the A/A control too) and
    decode_gather's at ``ring`` (``ring_launcher``: freetoken's ``cache_ring_launcher``)."""
    launch, reason = ring_launcher(cache, ring)
    if launch is None:
        raise RuntimeError(f"{SWITCH_ENV}=tma ({RING_ENV}={'x'.join(map(str, ring))}) cannot run on this cache: "
                           f"{reason}")  # fmt: skip
    return {Kernel.UPSTREAM: cache._whole_layer_copy, Kernel.TMA: launch, Kernel.UPSTREAM_AA: cache._whole_layer_copy}


def load_engine(args: argparse.Namespace) -> tuple[Any, Any, dict[str, Callable], Any]:
    """(the LLM, its offload cache, the kernels' launchers, torch) at ``args.slots`` slots."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")  # a local checkpoint; never wait on the network
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    import torch
    from freetoken.engine.graph import GraphRunner
    from freetoken.kernel import decode_gather
    from freetoken.moe.decode_gather_switch import cache_ring_launcher

    record_capture_args(GraphRunner)
    llm, cache, _ = worker._load(args, torch, **ENGINE_EXTRA)
    ring = decode_gather.ring_from_env() or decode_gather.default_ring()
    return llm, cache, launchers(cache, cache_ring_launcher, ring), torch


class InProcess:
    """``harness.execute``'s runner for one slot point: the LLM loaded at the first call and kept; every call sets
    the cache's decode miss launcher to the kernel's, re-captures the graphs and generates as the worker does.
    ``load``, ``generate`` and ``facts`` (the machine's): the engine's unless given (tests give fakes)."""

    def __init__(self, args: argparse.Namespace, *, load: Callable = load_engine, generate: Callable | None = None,
                 facts: Callable[[], dict[str, Any]] = machine_info) -> None:  # fmt: skip
        self.args, self.load, self.generate, self.facts = args, load, generate or worker._generate, facts
        self.loaded: tuple | None = None

    def __call__(self, repeat: int, point: int, kernel: str, p: dict[str, Any]) -> dict[str, Any]:
        try:
            t0, first, args = time.perf_counter(), self.loaded is None, argparse.Namespace(**{**vars(self.args), **p})
            if first:
                self.loaded = self.load(args)
            llm, cache, arms, torch = self.loaded
            t_loaded = time.perf_counter()
            cache._decode_miss_copy = arms[kernel]
            want, got = worker.expected_kernel(Kernel(kernel).env.get(SWITCH_ENV)), worker.copy_kernel(cache)
            if got != want:
                raise RuntimeError(f"the cache's decode miss launcher runs {got}, not {want}")
            recapture(llm.engine)
            capture_s = time.perf_counter() - t_loaded
            result = worker.measure(llm, cache, args, torch, self.generate(llm, args, torch)) | {"capture_s": capture_s}
        except (RuntimeError, ValueError) as exc:
            logging.getLogger(__name__).exception("round %d, %s", repeat + 1, kernel)
            raise worker.RunFailed(f"round {repeat + 1}, {kernel}: {exc}") from exc
        return result | ({"load_s": t_loaded - t0, "machine": self.facts()} if first else {})
