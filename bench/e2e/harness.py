"""The end-to-end A/B (``python -m bench.e2e run --model PATH ...``, bench/README.md): upstream against ``tma``, by
default on one engine in this process (:mod:`bench.e2e.inprocess`, one point, the A/A control ``upstream_aa``, the
rule ``aa``, every run's ids and misses the same), with ``--fresh-processes`` each run a fresh ``python -m bench.e2e
worker`` process (``--auto`` adds ``auto``; the rule ``repeats``, the ids the same within each repeat).

Plan: for every repeat (round), for every slot-cache point (``--slots`` of the unified expert pool, or
``--miss-rate`` through a generated checkpoint's predicted table, :mod:`bench.e2e.synth`), every kernel in
suite.rounds' alternating order; every kernel against upstream is a :class:`suite.stats.Comparison`.

Exit codes: 0 done, ids identical; 1 ids differ; 2 a run failed, a setting is invalid, or the time
budget stopped the plan early (the JSON then says ``complete: false``).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import entry
from bench.e2e import synth
from bench.e2e.summary import KERNELS, ids_mismatches, settings, state_mismatches, summarize_point
from bench.e2e.worker import PROMPT, WARMUP_TOKENS, RunFailed, checkpoint_num_experts
from suite import results
from suite.commands import MEASUREMENTS
from suite.models import E2E
from suite.kernels import SWITCH_ENV, Kernel
from suite.rounds import round_order

E2E_SCHEMA = MEASUREMENTS["e2e"].schema
DEFAULT_MISS_RATES = (0.1, 0.3)
#: rounds of the in-process A/B, and fresh processes per kernel and point, unless --repeats says otherwise
ROUNDS, REPEATS = 10, 3
EXIT_OK, EXIT_IDS_DIFFER, EXIT_FAILED = 0, 1, 2
#: Between two workers: the last one's pinned banks, VRAM and port 2333 (its process group) go back first.
PAUSE_S = 1.0
#: the order of the kernels in each (repeat, point): suite.rounds' alternation over repeat + point
ORDER = "alternate"


log = logging.getLogger(__name__).info  # the messages; main() sets their format


def in_process(args: argparse.Namespace) -> bool:
    return not getattr(args, "fresh_processes", True)


def kernel_names(args: argparse.Namespace) -> tuple[str, ...]:
    """The kernels of this session: upstream (FREETOKEN_DECODE_GATHER unset) and tma, then the A/A control
    upstream_aa in one process, or auto with ``--auto`` in fresh ones."""
    return KERNELS + ((Kernel.UPSTREAM_AA,) if in_process(args) else (Kernel.AUTO,) if getattr(args, "auto", 0) else ())


def schedule(points: int, repeats: int, names: Sequence[str] = KERNELS) -> list[tuple[int, int, str]]:
    """``(repeat, point, kernel)`` in run order: repeats outermost so an early stop still leaves
    every point with whole repeats; within a (repeat, point) every kernel of ``names`` in suite.rounds' alternating
    order: as listed when ``repeat + point`` is even, reversed when it is odd (drift cancels across repeats)."""
    return [(r, p, v) for r in range(repeats) for p in range(points) for v in round_order(ORDER, r + p, tuple(names))]


def resolve_points(model: str, slots: Sequence[int] | None, miss_rates: Sequence[float] | None,
                   defaults: Sequence[float] = DEFAULT_MISS_RATES) -> list[dict[str, Any]]:  # fmt: skip
    """The slot-cache points: ``{"slots", "target_miss_rate", "predicted_miss_rate"}`` each."""
    sidecar = synth.read_sidecar(model)
    table = sidecar.get("miss_table") if sidecar else None
    if slots:
        if miss_rates:
            raise ValueError("pass --slots or --miss-rate, not both")
        return [{"slots": int(k), "target_miss_rate": None,
                 "predicted_miss_rate": synth.predicted_miss_rate(table, int(k)) if table else None} for k in slots]  # fmt: skip
    if not table:
        raise ValueError(f"--model {model} has no {synth.SIDECAR} (not made by `python -m bench.e2e make-checkpoint`), "
                         "so --miss-rate cannot be turned into slots: pass --slots K [K ...], slot counts of the "
                         "unified expert cache (the proposal ran Qwen3.6-35B-A3B NVFP4 with --slots 3164 at ~0.1 "
                         "misses per lookup)")  # fmt: skip
    ks = [(r, synth.slots_for_miss_rate(table, r)) for r in miss_rates or defaults]
    return [{"slots": k, "target_miss_rate": r, "predicted_miss_rate": synth.predicted_miss_rate(table, k)}
            for r, k in ks]  # fmt: skip


def check_points(points: list[dict[str, Any]], num_experts: int) -> None:
    for p in points:
        if p["slots"] < num_experts:
            raise ValueError(f"--slots {p['slots']}: the offload cache needs at least num_experts={num_experts} slots "
                             f"(allowed: {num_experts} .. layers x {num_experts})")
    seen = [p["slots"] for p in points]
    if len(set(seen)) != len(seen):
        raise ValueError(f"slot points {seen} repeat a slot count; give distinct points")


def model_info(model: str) -> dict[str, Any]:
    raw = (Path(model) / "config.json").read_bytes()
    cfg = json.loads(raw)
    text = cfg.get("text_config") or cfg
    sidecar = synth.read_sidecar(model)
    return {
        "name": Path(model).resolve().name,  # not the path: on another host it names a home directory
        "config_sha256": hashlib.sha256(raw).hexdigest(),
        "architecture": (cfg.get("architectures") or [None])[0],
        **{k: text.get(k) for k in ("num_hidden_layers", "num_experts", "num_experts_per_tok", "hidden_size",
                                    "moe_intermediate_size")},
        "quant_algo": (cfg.get("quantization_config") or text.get("quantization_config") or {}).get("quant_algo"),
        "synthetic": None if sidecar is None else {k: sidecar.get(k) for k in ("spec", "generated_on",
                                                                              "bank_bytes_per_expert", "miss_table")},
    }  # fmt: skip


def serve_equivalent(model: str, slots: int, extra: str = "") -> str:
    return (f"ft serve --model {model} --moe-strategy offload --moe-cache-size {slots} --max-running-requests 1 "
            f"--cuda-graph-max-bs 1 --moe-collect-stats --text-model-only{extra}")  # fmt: skip


Runner = Callable[[int, int, str, dict[str, Any]], dict[str, Any]]


def in_process_runner(args: argparse.Namespace) -> Runner:
    from bench.e2e.inprocess import InProcess  # one engine in this process: torch and freetoken

    return InProcess(args)


def worker_runner(args: argparse.Namespace, log_dir: Path) -> Runner:
    """Runs one ``python -m bench.e2e worker`` process per call; its output goes to a log file."""

    calls = []

    def run(repeat: int, point: int, kernel: str, p: dict[str, Any]) -> dict[str, Any]:
        if calls:
            time.sleep(PAUSE_S)
        calls.append((repeat, point, kernel))
        tag = f"r{repeat}-p{point}-{kernel}"
        result, log_path = log_dir / f"{tag}.json", log_dir / f"{tag}.log"
        env = {k: v for k, v in os.environ.items() if k != SWITCH_ENV} | Kernel(kernel).env
        env.setdefault("PYTHONUNBUFFERED", "1")
        cmd = [sys.executable, "-m", "bench.e2e", "worker", "--model", str(args.model), "--slots", str(p["slots"]),
               "--tokens", str(args.tokens), "--skip", str(args.skip), "--kv-tokens", str(args.kv_tokens),
               "--result", str(result)] + (["--machine"] if len(calls) == 1 else [])  # fmt: skip
        return run_worker(tag, cmd, env, result, log_path, args.run_timeout_s)

    return run


def run_worker(tag: str, cmd: list[str], env: dict[str, str], result: Path, log_path: Path, timeout_s: float) -> dict:
    """Run one worker process (output to ``log_path``) and read the JSON it wrote to ``result``;
    :class:`RunFailed` with the log's last lines when it fails, times out or writes nothing."""
    with open(log_path, "wb") as f:
        try:
            rc = subprocess.run(cmd, cwd=results.REPO_ROOT, env=env, stdout=f, stderr=subprocess.STDOUT,
                                timeout=timeout_s, check=False).returncode  # fmt: skip
        except subprocess.TimeoutExpired:
            rc = None
    if rc != 0 or not result.is_file():
        tail = "".join(log_path.read_text(errors="replace").splitlines(keepends=True)[-40:])
        why = f"timed out after {timeout_s} s" if rc is None else f"exit {rc}"
        raise RunFailed(f"{tag}: worker {why}; log {log_path}, last lines:\n{tail}")
    return json.loads(result.read_text())


def execute(points: list[dict[str, Any]], repeats: int, runner: Runner, *,
            on_update: Callable[[list[dict[str, Any]], bool, list[str]], None], budget_s: float | None = None,
            clock: Callable[[], float] = time.monotonic, names: Sequence[str] = KERNELS) -> int:  # fmt: skip
    """Run the plan; ``on_update(runs, complete, errors)`` after every run. Returns the exit code: stops at the first
    (repeat, point) whose kernels' ids differ (rounds of one process, with the A/A control among ``names``: the first
    run whose ids or misses differ from its point's first) (1), at the first failed run (2), or before a run that
    would overrun ``budget_s`` (2, incomplete)."""
    across_rounds = Kernel.UPSTREAM_AA in names  # every run from the same cold cache: all must agree
    runs: list[dict[str, Any]] = []
    errors: list[str] = []
    plan = schedule(len(points), repeats, names)

    def stop(why: str, code: int) -> int:
        errors.append(why)
        log(why)
        on_update(runs, False, errors)
        return code

    t0, longest, unit = clock(), 0.0, "round" if across_rounds else "repeat"
    for k, (r, p, v) in enumerate(plan):
        elapsed = clock() - t0
        if budget_s is not None and elapsed + longest > budget_s:
            return stop(f"time budget {budget_s:.0f} s: stopped with {len(plan) - k} of {len(plan)} runs to go "
                        f"({elapsed:.0f} s spent); the document says complete: false", EXIT_FAILED)  # fmt: skip
        log(f"run {k + 1}/{len(plan)}: {unit} {r + 1}/{repeats}, slots {points[p]['slots']}, {v} ...")
        t = clock()
        try:
            res = runner(r, p, v, points[p])
        except RunFailed as exc:
            return stop(str(exc), EXIT_FAILED)
        longest = max(longest, clock() - t)
        runs.append({"repeat": r, "point": p, "kernel": v, **res})
        step = res.get("step_ms") or {}
        log(f"  {v}: {res['tokens_per_s']:.2f} tok/s (step p50 {step.get('p50', float('nan')):.3f} ms, "
            f"p90 {step.get('p90', float('nan')):.3f} ms), TTFT {res['ttft_s']:.3f} s, "
            f"{res['misses_per_token']:.1f} misses/token (rate {res['miss_rate']:.3f}), "
            f"{res['copy_kernel']}, load {res.get('load_s', 0):.0f} s, ids {res['ids_sha256'][:12]}")  # fmt: skip
        scope = [x for x in runs if x["point"] == p and (across_rounds or x["repeat"] == r)]
        if mism := (state_mismatches if across_rounds else ids_mismatches)(scope):
            what = "ids or miss counts" if across_rounds else "ids"
            return stop(f"generated {what} differ between {'/'.join(names)} ({unit} {r + 1}, slots "
                        f"{points[p]['slots']}): {mism}", EXIT_IDS_DIFFER)  # fmt: skip
        on_update(runs, k + 1 == len(plan), errors)
    if not plan:
        on_update(runs, True, errors)
    return EXIT_OK


def document_fields(args: argparse.Namespace, model: dict[str, Any], points: list[dict[str, Any]],
                    runs: list[dict[str, Any]], complete: bool, errors: list[str], exit_code: int | None
                    ) -> tuple[dict[str, Any], dict[str, Any]]:  # fmt: skip
    """(the machine, the document's fields) for the runs so far (``model``: :func:`model_info` of
    ``--model``, read once per session)."""
    machine = next((r.get("machine") for r in runs if r.get("machine")), None) or {}
    names, one = kernel_names(args), in_process(args)
    summaries = [summarize_point(pt, i, runs, names) for i, pt in enumerate(points)]
    identical = [s["ids_identical"] for s in summaries if s["ids_identical"] is not None]
    raw = [{k: v for k, v in r.items() if k != "machine"} for r in runs]
    return machine, {
        "model": model,
        "settings": {
            "tokens": args.tokens, "skip": args.skip, "repeats": args.repeats, "kv_tokens": args.kv_tokens,
            "batch": 1, "cuda_graph_decode": True, "moe_strategy": "offload",
            "sampling": "greedy (temperature 0), ignore_eos",
            "prompt_sha256": hashlib.sha256(PROMPT.encode()).hexdigest(),
            "warmup_tokens": WARMUP_TOKENS, "kernels": settings(names),
            "order": ORDER,  # suite.rounds' order of each (repeat, point): the runs are listed as they ran
            "rule": "aa" if one else "repeats",  # suite.stats.RULES: the Comparison of each kernel against upstream
            "process": "one: before every run the kernel's launcher set, the CUDA graphs re-captured, the prefix "
                       "cache off (cache_type naive)" if one else "a fresh process per run",
            "serve_equivalent": [serve_equivalent("MODEL", p["slots"], " --cache-type naive" * one) for p in points],
            "tokens_per_s": "tokens / (t[skip + tokens] - t[skip]), host arrival stamps of the generated tokens",
            "misses_per_token": "the offload cache's own decode counters over the same window x MoE layers",
        },
        "points": summaries, "ids_identical": all(identical) if identical else None, "complete": complete,
        "exit_code": exit_code, "errors": errors, "runs": raw,
    }  # fmt: skip


def main(args: argparse.Namespace) -> int:
    model = Path(args.model)
    if not (model / "config.json").is_file():
        log(f"--model {args.model}: no config.json there; pass an HF-layout checkpoint directory")
        return EXIT_FAILED
    one = in_process(args)
    args.repeats = args.repeats or (ROUNDS if one else REPEATS)
    try:
        num_experts = checkpoint_num_experts(str(model))
        points = resolve_points(str(model), args.slots, args.miss_rate, DEFAULT_MISS_RATES[: 1 if one else None])
        check_points(points, num_experts)
        if one and len(points) > 1:  # what one engine in this process cannot run: several points, --auto
            option, given = ("--slots", args.slots) if args.slots else ("--miss-rate", args.miss_rate)
            raise ValueError(f"{option} {' '.join(map(str, given))}: the in-process A/B (the default) measures one "
                             "slot point per run; pass one value, or add --fresh-processes to measure several")  # fmt: skip
        if one and args.auto:
            raise ValueError("--auto runs with --fresh-processes only (the in-process A/B pairs its own rounds)")
        if args.skip < 0:
            raise ValueError(f"--skip {args.skip}: must be >= 0")
        if args.kv_tokens < 1024 + args.skip + args.tokens + 1:
            raise ValueError(f"--kv-tokens {args.kv_tokens}: must cover prompt + skip + tokens + 1024 spare "
                             f"(>= {1024 + args.skip + args.tokens + 1})")  # fmt: skip
    except ValueError as exc:
        log(str(exc))
        return EXIT_FAILED
    if one:
        runner, where = in_process_runner(args), "one engine in this process"
    else:
        log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="ft-e2e-"))
        log_dir.mkdir(parents=True, exist_ok=True)
        runner, where = worker_runner(args, log_dir), f"a fresh process per run, logs in {log_dir}"
    log(f"model {model}: {len(points)} point(s) {[p['slots'] for p in points]} slots "
        f"(target miss rate {[p['target_miss_rate'] for p in points]}), {args.repeats} {'round' if one else 'repeat'}(s) "
        f"x {len(kernel_names(args))} kernels {kernel_names(args)}, {args.tokens} tokens after {args.skip}; {where}")  # fmt: skip
    info = model_info(str(model))
    # only the first save keeps the document it replaces: the later ones replace this measurement's own
    state: dict[str, Any] = {"runs": [], "complete": False, "errors": [], "keep": True}

    def on_update(runs: list[dict[str, Any]], complete: bool, errors: list[str], exit_code: int | None = None) -> Path:
        state.update(runs=list(runs), complete=complete, errors=list(errors))
        found, fields = document_fields(args, info, points, runs, complete, errors, exit_code)
        # the workers' GPU names the device: this process may never touch CUDA
        path = entry.save("e2e", args, E2E.from_doc(fields), found, device=found.get("device_slug") or "unknown",
                          keep_replaced=state["keep"])  # fmt: skip
        state.update(keep=False, points=fields["points"])  # the summaries: print_summary reads them
        return path

    code = execute(points, args.repeats, runner, on_update=on_update, budget_s=args.budget_s, names=kernel_names(args))
    path = on_update(state["runs"], state["complete"] and code == EXIT_OK, state["errors"], code)
    print_summary(state["points"], kernel_names(args))
    log(f"wrote {path} (exit {code})")
    return code


def print_summary(summaries: list[dict[str, Any]], names: Sequence[str] = KERNELS) -> None:
    for s in summaries:
        kernels = {v: s["kernels"][v] for v in names}
        parts = [f"{v} {d['tokens_per_s_median']:.2f} tok/s [{d['tokens_per_s_min']:.2f}-{d['tokens_per_s_max']:.2f}] "
                 f"x{d['repeats']}, {d['misses_per_token_median']:.1f} misses/token"
                 for v, d in kernels.items() if d["repeats"]]  # fmt: skip
        ratios = [f"{k}/upstream {c.ratio:.4f} (paired {c.paired_min:.4f}-{c.paired_max:.4f}, {c.verdict}"
                  f"{f', A/A spread {c.aa_spread:.4f}' if c.aa_spread is not None else ''})"
                  if c.ratio and c.paired_min else f"{k}/upstream n/a" for k, c in s["ratio"].items()]  # fmt: skip
        log(f"slots {s['slots']}: {'; '.join(parts) or 'no runs'}; {'; '.join(ratios)}; "
            f"ids identical: {s['ids_identical']}")
