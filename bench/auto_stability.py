"""Does ``FREETOKEN_DECODE_GATHER=auto`` decide the same way every time? ``python -m bench.auto_stability
[--runs 5] [--slots 3164] [--gib G]``: each run a fresh ``--worker`` process allocates the model's host banks as
FreeToken does (``--gib`` scales the layers down), builds a real ``OffloadMoeCache`` with ``auto`` (its probe
runs inside ``set_bank_sources``), records what it chose and the probe's cost, then probes the same cache once
more and checks the probe allocates nothing that outlives it and leaves the slot bytes, slot map and LRU
state as they were.

Exit codes: 0 every run completed, the cache left as found; 1 a probe changed the cache or left
memory allocated; 2 a run failed or a setting is invalid.
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from gpukit.decode_step import choice_fields
from suite.models import AutoStability, AutoSummary
from bench import entry
from suite.kernels import SWITCH_ENV, Kernel

EXIT_OK, EXIT_CHANGED, EXIT_FAILED = 0, 1, 2
#: the proposal's decode run held 3164 experts in VRAM
DEFAULT_SLOTS = 3164


log = logging.getLogger("bench.auto_stability").info  # the messages (named: the module runs as __main__); main() sets their format


def _typed_sources(banks, geoms) -> dict[str, list[Any]]:
    """The nvfp4 schema's typed ``[experts, *shape]`` views of every layer's host banks."""
    fp = banks.fp
    def typed(layer: int, k: int, g) -> Any:
        rows = banks.host[layer][k].tensor.view(fp.experts, fp.row_bytes[k])
        return rows.view(g.torch_dtype()).view(fp.experts, *g.shape)

    return {g.name: [typed(layer, k, g) for layer in range(fp.layers)] for k, g in enumerate(geoms)}


def _cache_state(cache) -> dict[str, Any]:
    names = ("slot_for_id", "id_of_slot", "usage", "step", "lru_stats", "evict_slots", "src_indices", "num_indices")
    return {n: getattr(cache, n).clone() for n in names} | {f"bank {k}": v.clone() for k, v in cache.bank_caches.items()}


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from freetoken.moe import decode_gather_auto
    from freetoken.moe.decode_gather_auto import choose_decode_gather
    from freetoken.moe.offload_cache import OffloadMoeCache
    from gpukit.decode_regime import Footprint, ModelBanks
    from gpukit.decode_step import gather_env
    from suite.geometry import nvfp4_banks
    from gpukit.machine import machine_info

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    fp = Footprint.scaled(args.gib)
    banks = ModelBanks(fp, device, seed=args.seed, progress=log)
    banks.ref = []  # the device copy of the banks is not needed here: free its VRAM before the cache
    torch.cuda.empty_cache()
    with gather_env(Kernel.AUTO.env):
        cache = OffloadMoeCache(num_layers=fp.layers, num_experts=fp.experts, cache_size=args.slots, device=device,
                                prefill_overlap=False, quant_format="nvfp4")  # fmt: skip
        t0 = time.perf_counter()
        cache.set_bank_sources(_typed_sources(banks, nvfp4_banks()))  # the probe runs in here
        set_s = time.perf_counter() - t0
    first = cache.decode_gather_auto
    if first is None:
        raise RuntimeError(f"{SWITCH_ENV}=auto built a cache without decode_gather_auto: the series lacks auto")
    torch.cuda.synchronize(device)
    before, allocated = _cache_state(cache), torch.cuda.memory_allocated(device)
    t0 = time.perf_counter()
    decode_gather_auto._CHOICES.clear()  # else the same geometry reuses the first choice: probe it again
    again = choose_decode_gather(cache)
    torch.cuda.synchronize(device)
    again_s = time.perf_counter() - t0
    leaked = torch.cuda.memory_allocated(device) - allocated
    after = _cache_state(cache)
    changed = [name for name, value in before.items() if not torch.equal(value, after[name])]
    out = {"pid": os.getpid(), "footprint": fp.describe(), "slots": args.slots, "choice": choice_fields(first),
           "set_bank_sources_s": set_s, "again": choice_fields(again), "again_wall_s": again_s,
           "again_allocated_bytes": leaked, "again_changed": changed}  # fmt: skip
    if args.machine:
        out["machine"] = machine_info()
    banks.close()
    return out


def run_one(index: int, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    from bench.e2e.harness import run_worker

    result, log_path = log_dir / f"run{index}.json", log_dir / f"run{index}.log"
    cmd = [sys.executable, "-m", "bench.auto_stability", "--worker", "--result", str(result), "--slots",
           str(args.slots), "--seed", str(args.seed + index)] + (["--gib", str(args.gib)] if args.gib else []) + (
           ["--machine"] if index == 0 else [])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != SWITCH_ENV} | {"PYTHONUNBUFFERED": "1"}
    return run_worker(f"run {index}", cmd, env, result, log_path, args.timeout_s)


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """What auto chose over the runs (both probes of each), and the probe's cost."""
    chosen = [r["choice"]["label"] for r in runs]
    again = [r["again"]["label"] for r in runs]
    probe_ms = [r["choice"]["probe_s"] * 1e3 for r in runs] + [r["again"]["probe_s"] * 1e3 for r in runs]
    load_ms = [r["choice"]["load_s"] * 1e3 for r in runs]
    counts = {label: (chosen + again).count(label) for label in dict.fromkeys(chosen + again)}
    probes = [r[k] for r in runs for k in ("choice", "again")]
    return {
        "runs": len(runs), "chosen": chosen, "chosen_again": again, "counts": counts,
        "same_every_time": len(counts) == 1, "default": runs[0]["choice"]["default"] if runs else None,
        "kept_default_every_time": bool(runs) and all(p["label"] == p["default"] for p in probes),
        "probe_ms_min": min(probe_ms, default=None), "probe_ms_max": max(probe_ms, default=None),
        "probe_ms_median": statistics.median(probe_ms) if probe_ms else None, "load_ms_max": max(load_ms, default=None),
        "spread_max": max((p["spread"] for p in probes if p["spread"] is not None), default=None),
        "cache_left_as_found": all(not r["again_changed"] and r["again_allocated_bytes"] == 0 for r in runs),
    }  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = entry.parser("auto_stability")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes (default 5; at least 1)")
    ap.add_argument("--slots", type=int, default=DEFAULT_SLOTS, help=f"slot-cache size (default {DEFAULT_SLOTS})")
    ap.add_argument("--gib", type=float, default=None, help="cap the host banks at this many GiB (fewer layers)")
    ap.add_argument("--seed", type=int, default=1, help="bank bytes of run i are drawn with seed + i")
    ap.add_argument("--log-dir", default=None, help="worker logs and raw results (default: a temp dir, kept only after a failed run)")
    ap.add_argument("--timeout-s", type=int, default=300, help="kill a worker after this long (default 300)")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", default=None, help=argparse.SUPPRESS)
    ap.add_argument("--machine", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.runs < 1:
        ap.error(f"--runs {args.runs}: must be at least 1")
    if args.slots < 1:
        ap.error(f"--slots {args.slots}: must be at least 1")
    if args.gib is not None and args.gib <= 0:
        ap.error(f"--gib {args.gib}: must be positive")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.worker:
        Path(args.result).write_text(json.dumps(worker(args), indent=1, default=str))
        return EXIT_OK
    from gpukit.skips import cuda_skip_reason

    if why := cuda_skip_reason():
        log(f"cannot run: {why}")
        return EXIT_FAILED
    log_dir = Path(args.log_dir) if args.log_dir else Path(tempfile.mkdtemp(prefix="ft-auto-"))
    log_dir.mkdir(parents=True, exist_ok=True)
    runs, errors = [], []
    for i in range(args.runs):
        log(f"run {i + 1}/{args.runs} (fresh process; logs in {log_dir}) ...")
        try:
            runs.append(run_one(i, args, log_dir))
        except RuntimeError as exc:  # bench.e2e.harness.RunFailed
            errors.append(str(exc))
            log(str(exc))
            break
        r = runs[-1]
        log(f"  chose {r['choice']['label']} ({r['choice']['reason']}); again {r['again']['label']}; probe "
            f"{r['choice']['probe_s'] * 1e3:.0f} ms + {r['choice']['load_s'] * 1e3:.0f} ms loading, "
            f"again {r['again_wall_s'] * 1e3:.0f} ms wall; left as found: "
            f"{not r['again_changed'] and r['again_allocated_bytes'] == 0}")  # fmt: skip
    if not args.log_dir and (not errors or not any(log_dir.iterdir())):  # our temp dir: kept for a failed run's logs
        shutil.rmtree(log_dir, ignore_errors=True)
    machine = next((r.pop("machine") for r in runs if r.get("machine")), {})
    settings = {"runs": args.runs, "slots": args.slots, "gib": args.gib, "seed": args.seed}
    doc = AutoStability(settings=settings, summary=AutoSummary.from_doc(summarize(runs)), runs=runs, errors=errors)
    entry.save("auto_stability", args, doc, machine=machine)
    s = doc.summary
    log(f"{s.counts} over {len(runs)} process(es) x 2 probes; probe {s.probe_ms_min}-{s.probe_ms_max} ms; "
        f"cache left as found: {s.cache_left_as_found}")
    if errors:
        return EXIT_FAILED
    return EXIT_OK if s.cache_left_as_found else EXIT_CHANGED


if __name__ == "__main__":
    raise SystemExit(main())
