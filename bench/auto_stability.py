"""Does ``FREETOKEN_DECODE_GATHER=auto`` run ``ft bench bw``'s pick in every fresh process, timing nothing at
start-up? ``python -m bench.auto_stability [--runs 5] [--slots 3164] [--gib G] [--profile FILE]``: ``ft bench bw``
on the model's layer kind first (:data:`BENCH`; not with ``--profile``), then each run a fresh ``--worker`` process
allocates the model's host banks as FreeToken does (``--gib`` scales the layers down) and builds a real
``OffloadMoeCache`` on them unset, then with ``auto`` reading the profile, each ``set_bank_sources`` timed, CUDA
graph captures and event timings counted; it records what ``auto`` runs and the line it logged.

Exit codes: 0 every run ran the profile's pick, the same kernel, and captured and timed nothing while the cache
was built; 1 a run did not; 2 a run or the bench failed, or a setting is invalid.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

from suite.models import AutoStability, AutoSummary
from bench import entry
from bench.e2e.harness import run_worker
from suite.kernels import SWITCH_ENV, Kernel

EXIT_OK, EXIT_DIFFERED, EXIT_FAILED = 0, 1, 2
#: the proposal's decode run held 3164 experts in VRAM
DEFAULT_SLOTS = 3164
#: ``ft bench bw`` on the layer kind of the model the runs allocate (Qwen3.6-35B-A3B NVFP4: the same bank rows)
BENCH = ("-m", "freetoken.moe.benchbw", "--model", "qwen3.6-moe", "--formats", "nvfp4")


log = logging.getLogger("bench.auto_stability").info  # the messages (named: the module runs as __main__); main() sets their format


def _typed_sources(banks, geoms) -> dict[str, list[Any]]:
    """The nvfp4 schema's typed ``[experts, *shape]`` views of every layer's host banks."""
    fp = banks.fp
    def typed(layer: int, k: int, g) -> Any:
        rows = banks.host[layer][k].tensor.view(fp.experts, fp.row_bytes[k])
        return rows.view(g.torch_dtype()).view(fp.experts, *g.shape)

    return {g.name: [typed(layer, k, g) for layer in range(fp.layers)] for k, g in enumerate(geoms)}


@contextlib.contextmanager
def counted(torch) -> Iterator[dict[str, int]]:
    """``{"captured", "timed"}``: CUDA graph captures begun and event timings read meanwhile."""
    seen, saved, cuda = {"captured": 0, "timed": 0}, [], torch.cuda
    for cls, attr, key in ((cuda.CUDAGraph, "capture_begin", "captured"), (cuda.Event, "elapsed_time", "timed")):
        saved.append((cls, attr, getattr(cls, attr)))
        setattr(cls, attr, lambda *a, _f=saved[-1][2], _k=key, **kw: seen.update({_k: seen[_k] + 1}) or _f(*a, **kw))
    try:
        yield seen
    finally:
        for cls, attr, orig in saved:
            setattr(cls, attr, orig)


def worker(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from freetoken.moe.offload_cache import OffloadMoeCache
    from gpukit.decode_regime import Footprint, ModelBanks
    from gpukit.decode_step import auto_pick, gather_env
    from gpukit.machine import machine_info
    from suite.geometry import nvfp4_banks

    device = torch.device("cuda", 0)
    torch.cuda.set_device(device)
    fp = Footprint.scaled(args.gib)
    banks = ModelBanks(fp, device, seed=args.seed, progress=log)
    banks.ref = []  # the device copy of the banks is not needed here: free its VRAM before the caches
    torch.cuda.empty_cache()
    sources = _typed_sources(banks, nvfp4_banks())
    out: dict[str, Any] = {"pid": os.getpid(), "footprint": fp.describe(), "slots": args.slots}
    for name, env in (("unset", {}), ("auto", Kernel.AUTO.env)):  # the unset cache first: it pays first-use loads
        with gather_env(env), counted(torch) as seen:
            cache = OffloadMoeCache(num_layers=fp.layers, num_experts=fp.experts, cache_size=args.slots, device=device,
                                    prefill_overlap=False, quant_format="nvfp4")  # fmt: skip
            t0 = time.perf_counter()
            cache.set_bank_sources(sources)  # auto reads the profile in here
            torch.cuda.synchronize(device)
            out[f"{name}_set_bank_sources_s"] = time.perf_counter() - t0
        out |= {"pick": auto_pick(cache), **seen} if name == "auto" else {}
        del cache
        torch.cuda.empty_cache()
    if out["pick"] is None:
        raise RuntimeError(f"{SWITCH_ENV}=auto built a cache that read no pick: the series lacks auto")
    out |= {"machine": machine_info()} if args.machine else {}
    banks.close()
    return out


def run_one(index: int, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    result, log_path = log_dir / f"run{index}.json", log_dir / f"run{index}.log"
    cmd = [sys.executable, "-m", "bench.auto_stability", "--worker", "--result", str(result), "--slots",
           str(args.slots), "--seed", str(args.seed + index)] + (["--gib", str(args.gib)] if args.gib else []) + (
           ["--machine"] if index == 0 else [])  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != SWITCH_ENV} | {"PYTHONUNBUFFERED": "1"}
    return run_worker(f"run {index}", cmd, env | {"FREETOKEN_BENCHBW_PATH": args.profile}, result, log_path,
                      args.timeout_s)  # fmt: skip


def bench_profile(path: Path, args: argparse.Namespace, log_dir: Path) -> dict[str, Any]:
    """``ft bench bw`` (:data:`BENCH`) into ``path`` (its log beside the runs'); the profile it wrote."""
    env = {k: v for k, v in os.environ.items() if k != SWITCH_ENV} | {"PYTHONUNBUFFERED": "1"}
    return run_worker("ft bench bw", [sys.executable, *BENCH, "-o", str(path)], env, path, log_dir / "benchbw.log",
                      args.timeout_s)  # fmt: skip


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """What auto ran over the runs, whether it followed the profile, and what building its cache cost."""
    chosen = [r["pick"]["label"] for r in runs]
    counts = {label: chosen.count(label) for label in dict.fromkeys(chosen)}
    ms = {k: max((r[f"{k}_set_bank_sources_s"] * 1e3 for r in runs), default=None) for k in ("auto", "unset")}
    return {"runs": len(runs), "chosen": chosen, "counts": counts, "same_every_time": len(counts) == 1,
            "followed_profile": bool(runs) and all(r["pick"]["entry"] is not None for r in runs),
            "captured_or_timed": sum(r["captured"] + r["timed"] for r in runs), "auto_ms_max": ms["auto"],
            "unset_ms_max": ms["unset"]}  # fmt: skip


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = entry.parser("auto_stability")
    ap.add_argument("--runs", type=int, default=5, help="fresh processes (default 5; at least 1)")
    ap.add_argument("--slots", type=int, default=DEFAULT_SLOTS, help=f"slot-cache size (default {DEFAULT_SLOTS})")
    ap.add_argument("--gib", type=float, default=None, help="cap the host banks at this many GiB (fewer layers)")
    ap.add_argument("--seed", type=int, default=1, help="bank bytes of run i are drawn with seed + i")
    ap.add_argument("--profile", default=None, help="an ft bench bw profile to read (default: run ft bench bw first)")
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
    if args.profile is not None and not Path(args.profile).is_file():
        ap.error(f"--profile {args.profile}: no such file")
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
    runs, errors, profile = [], [], {}
    try:  # a failed bench or run (RunFailed) ends the session
        if args.profile is None:
            args.profile = str(log_dir / "benchbw.json")
            log(f"ft bench bw first: {' '.join(BENCH[1:])} -o {args.profile} (log {log_dir / 'benchbw.log'}) ...")
            bench_profile(Path(args.profile), args, log_dir)
        profile = json.loads(Path(args.profile).read_text())
        for i in range(args.runs):
            log(f"run {i + 1}/{args.runs} (fresh process; logs in {log_dir}) ...")
            r = run_one(i, args, log_dir)
            runs.append(r)
            log(f"  {r['pick']['line']}; set_bank_sources {r['auto_set_bank_sources_s'] * 1e3:.0f} ms (unset "
                f"{r['unset_set_bank_sources_s'] * 1e3:.0f}), {r['captured']} captures, {r['timed']} timings")
    except RuntimeError as exc:
        errors.append(str(exc))
        log(str(exc))
    if not args.log_dir and (not errors or not any(log_dir.iterdir())):  # our temp dir: kept for a failed run's logs
        shutil.rmtree(log_dir, ignore_errors=True)
    machine = next((r.pop("machine") for r in runs if r.get("machine")), {})
    settings = {"runs": args.runs, "slots": args.slots, "gib": args.gib, "seed": args.seed, "profile": args.profile,
                "decode_gather": profile.get("decode_gather")}  # fmt: skip
    s = summarize(runs)  # the model's fields, and in its extra what auto does since it reads a profile
    entry.save("auto_stability", args, AutoStability(settings=settings, summary=AutoSummary.from_doc(s), runs=runs,
                                                      errors=errors), machine=machine)  # fmt: skip
    log(f"{s['counts']} over {len(runs)} process(es); followed the profile: {s['followed_profile']}; "
        f"{s['captured_or_timed']} captures or timings while building")
    if errors:
        return EXIT_FAILED
    return EXIT_OK if s["same_every_time"] and s["followed_profile"] and not s["captured_or_timed"] else EXIT_DIFFERED


if __name__ == "__main__":
    raise SystemExit(main())
