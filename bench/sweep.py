"""Host->device ceiling sweep: what a gather from pinned host memory can reach on THIS machine.

    python -m bench.sweep                    # default grid, ~3-4 min on an H200 (mostly nvcc)
    python -m bench.sweep --quick            # a few configs, ~1 min
    python -m bench.sweep --ctas 8,16,32 --per-cta 4x8K,4x16K --ldg-blocks 8 --ce-sizes 64M
    python -m bench.sweep --dry-run          # CPU: synthetic numbers -> JSON + PNG in a temp dir

Three ways to move the bytes, every copy verified word-exact: the copy engine (``--ce-sizes``, the DMA
ceiling), upstream's LDG grid (1024 threads x ``--ldg-blocks`` per bank) and the series' TMA ring (``--ctas``
x ``--per-cta``), each "flat" (one bank of 1 MiB rows in order) and "gather" (the NVFP4 six banks, ``--gather-n``
random experts). Bytes in flight: :attr:`suite.geometry.Ring.bytes_in_flight`; LDG = blocks x 1024 x 16 B per
bank. Rings over ``MAX_RING_BYTES`` or this GPU's opt-in limit are skipped. Writes sweep.json and sweep.png
(:mod:`bench.sweep_figure`).
"""

from __future__ import annotations

import argparse
import logging
import math
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from bench import entry
from bench.sweep_figure import render_png
from gpukit.launch import call_tma, call_upstream, load_kernels, precompile
from gpukit.machine import machine_info, pcie_under_load
from gpukit.memory import HostBanks, MissList, PinnedBuffer, SlotCache, check_slot_cache, poison_value, random_misses
from gpukit.timing import bench, reps_for
from suite import results
from suite.commands import MEASUREMENTS
from suite.geometry import MODEL, NVFP4_EXPERT_BYTES, NVFP4_ROW_BYTES, UPSTREAM_THREADS, Ring, fmt_bytes, parse_size
from suite.models import Sweep

DEFAULTS = {"ctas": "1,2,4,8,16,32,64,132", "per_cta": "2x4K,4x8K,4x16K,3x32K", "ldg_blocks": "1,2,4,8,16,32",
            "ce_sizes": "64K,256K,1M,4M,16M,64M,256M"}  # fmt: skip
QUICK = {"ctas": "4,16,64", "per_cta": "4x8K,4x16K", "ldg_blocks": "4,8,16", "ce_sizes": "1M,64M"}
FLAT_ROW = 1 << 20
say = logging.getLogger("bench.sweep").info  # named: the module runs as __main__


def parse_rings(ctas: list[int], per_cta: str) -> list[Ring]:
    """Every CTA count x every ``STAGESxCHUNK`` of ``per_cta`` (comma-separated, the chunk as parse_size reads it)."""
    try:
        shapes = [(int(s), parse_size(chunk)) for s, chunk in (x.split("x") for x in per_cta.lower().split(","))]
        return [Ring(c, s, chunk) for s, chunk in shapes for c in ctas]
    except ValueError:
        raise ValueError(f"--per-cta {per_cta!r}: expected STAGESxCHUNK[,...], e.g. {QUICK['per_cta']}") from None


def ldg_record(blocks: int, **figures: Any) -> dict[str, Any]:
    return {"blocks_per_bank": blocks, "threads": UPSTREAM_THREADS, "bytes_in_flight": blocks * UPSTREAM_THREADS * 16,
            "flat_gbps": None, "gather_gbps": None, "error": None, **figures}  # fmt: skip


def ring_record(r: Ring, **figures: Any) -> dict[str, Any]:
    return {**r._asdict(), "tag": str(r), "bytes_in_flight": r.bytes_in_flight, "whole_ring_bytes": r.whole_ring_bytes,
            "flat_gbps": None, "gather_gbps": None, "error": None, **figures}  # fmt: skip


class Runner:
    """The buffers of the flat and the gather copy, and the timed, verified sets of each way to move them."""

    def __init__(self, args):
        import torch

        self.torch, self.args = torch, args
        self.dev = torch.device("cuda", torch.cuda.current_device())
        self.decode_gather, self.fast_index_copy = load_kernels()
        self.flat_rows = max(1, parse_size(args.flat_bytes) // FLAT_ROW)
        self.flat_banks = HostBanks(1, self.flat_rows, [FLAT_ROW], self.dev, seed=1)
        self.flat_cache = SlotCache(self.flat_rows, [FLAT_ROW], self.dev)
        self.flat_idx = torch.arange(self.flat_rows, dtype=torch.int32, device=self.dev)
        self.g_banks = HostBanks(1, MODEL["experts"], NVFP4_ROW_BYTES, self.dev, seed=2)
        self.g_cache = SlotCache(args.gather_n, NVFP4_ROW_BYTES, self.dev)
        self.g_misses = MissList(args.gather_n, "int32", self.dev)
        self.g_plan = random_misses(random.Random(0), args.gather_n, args.gather_n, args.gather_n, MODEL["experts"])
        self.g_misses.set(*self.g_plan, args.gather_n)

    def _time(self, call, nbytes: int, poison: Callable[[int], None], check: Callable[[int], str | None]) -> dict:
        """Median GB/s of ``--samples`` timed sets of ``reps`` calls (reps sized to ~``--target-ms``), each set
        poisoned first and verified after."""
        call()
        reps = reps_for(self.args.target_ms / 1e3, bench(call)[0], 2, 200)

        def verify(i: int) -> None:
            if err := check(poison_value(i)):
                raise AssertionError(err)

        seconds = bench(call, reps=reps, rounds=self.args.samples, before=lambda i: poison(poison_value(i)),
                        after=verify)  # fmt: skip
        samples = [nbytes * reps / s / 1e9 for s in seconds]
        return {"gbps": statistics.median(samples), "samples_gbps": samples, "reps": reps, "bytes": nbytes}

    def flat(self, call) -> dict:
        rows, cache = list(range(self.flat_rows)), self.flat_cache
        return self._time(call, self.flat_rows * FLAT_ROW, cache.poison,
                          lambda p: check_slot_cache(cache, p, [(rows, rows, self.flat_banks.dev[0])]))  # fmt: skip

    def gather(self, call) -> dict:
        dst, src = self.g_plan
        return self._time(call, len(dst) * self.g_banks.bytes_per_expert, self.g_cache.poison,
                          lambda p: check_slot_cache(self.g_cache, p, [(dst, src, self.g_banks.dev[0])]))  # fmt: skip

    def calls(self, call, module, shape) -> tuple[Callable[[], None], Callable[[], None]]:
        """(flat, gather) calls of one kernel (``call_tma`` or ``call_upstream`` of ``module``) at ``shape``."""
        fc, fb, gc, gb, gm = self.flat_cache, self.flat_banks, self.g_cache, self.g_banks, self.g_misses
        return (lambda: call(module, fc, fb.src_ptrs[0], self.flat_idx, None, None, shape),
                lambda: call(module, gc, gb.src_ptrs[0], gm.dst, gm.src, gm.num, shape))  # fmt: skip

    def busy_link(self, seconds: float = 0.5) -> None:
        """Back-to-back 64 MiB H2D copies for about ``seconds`` (while nvidia-smi samples the link)."""
        buf = PinnedBuffer(64 << 20)
        dst = self.torch.empty(64 << 20, dtype=self.torch.uint8, device=self.dev)
        for _ in range(max(1, int(seconds * 50e9 / (64 << 20)))):
            dst.copy_(buf.tensor, non_blocking=True)
        self.torch.cuda.synchronize()
        buf.close()

    def copy_engine(self, nbytes: int) -> dict:
        torch, buf = self.torch, PinnedBuffer(nbytes)
        ref = torch.empty(nbytes, dtype=torch.uint8, device=self.dev).random_(0, 256)
        buf.tensor.copy_(ref)
        dst = torch.empty_like(ref)
        out = self._time(lambda: dst.copy_(buf.tensor, non_blocking=True), nbytes, dst.fill_,
                         lambda p: None if torch.equal(dst, ref) else f"copy engine {nbytes} B: mismatch")  # fmt: skip
        buf.close()
        return out


def buildable(doc: dict[str, Any], rings: list[Ring], why_not: Callable[[Ring], str | None]) -> list[Ring]:
    """The rings ``why_not`` finds no reason against (their shared memory fits); the others recorded in
    ``doc["skipped"]`` with the reason."""
    doc["skipped"] += [{**r._asdict(), "reason": why_not(r)} for r in rings if why_not(r)]
    return [r for r in rings if not why_not(r)]


def over(max_ring: int) -> Callable[[Ring], str | None]:
    return lambda r: f"stages*chunk_bytes {r.ring_bytes} > MAX_RING_BYTES {max_ring}" if r.ring_bytes > max_ring else None


def smem_reason(decode_gather, device) -> Callable[[Ring], str | None]:
    """decode_gather's own limits: the most any device allows (MAX_RING_BYTES), then this device's opt-in limit."""
    return lambda r: over(decode_gather.MAX_RING_BYTES)(r) or decode_gather.smem_skip_reason(device, *r)


def synthetic(args, rings: list[Ring], ldg: list[int], ce_sizes: list[int], max_ring: int) -> dict[str, Any]:
    """``--dry-run``'s document (CPU): a saturating model of the figures, labelled synthetic."""
    peak = 53.0

    def model(inflight: float, eff: float = 1.0) -> float:
        return round(peak * eff * (1 - math.exp(-inflight / (160 << 10))), 2)

    doc = empty_doc(args, synthetic=True)
    doc["copy_engine"] = [{"bytes": s, "gbps": round(peak * s / (s + (96 << 10)), 2)} for s in ce_sizes]
    doc["ldg"] = [ldg_record(b, flat_gbps=model(b * UPSTREAM_THREADS * 16, 0.97),
                             gather_gbps=model(b * UPSTREAM_THREADS * 16 * 0.7, 0.95)) for b in ldg]  # fmt: skip
    doc["ring"] = [ring_record(r, flat_gbps=model(r.bytes_in_flight), gather_gbps=model(r.bytes_in_flight, 0.98))
                   for r in buildable(doc, rings, over(max_ring))]  # fmt: skip
    return doc


def empty_doc(args, synthetic: bool = False) -> dict[str, Any]:
    """The sweep document's fields before anything is measured (suite.results.save adds the header)."""
    return {
        "dry_run": bool(synthetic), "synthetic": bool(synthetic),
        "command": " ".join([MEASUREMENTS["sweep"].line, *sys.argv[1:]]),
        "flat": {"row_bytes": FLAT_ROW, "bytes": max(1, parse_size(args.flat_bytes) // FLAT_ROW) * FLAT_ROW},
        "gather": {"experts": args.gather_n, "bytes": args.gather_n * NVFP4_EXPERT_BYTES, "banks": NVFP4_ROW_BYTES},
        "copy_engine": [], "ldg": [], "ring": [], "skipped": [], "errors": {},
    }  # fmt: skip


def summarize(doc: dict[str, Any]) -> dict[str, Any]:
    """The copy engine's best GB/s and the best of each path (flat and gather, rings and LDG grids)."""
    ce = max((r["gbps"] for r in doc["copy_engine"]), default=None)
    out: dict[str, Any] = {"copy_engine_gbps": ce}
    for name in ("ring", "ldg"):
        for key in ("flat_gbps", "gather_gbps"):
            b = max((r for r in doc[name] if r.get(key)), key=lambda r: r[key], default=None)
            if b:
                out[f"best_{name}_{key}"] = {"config": b.get("tag") or f"{b['blocks_per_bank']}x{b['threads']}",
                                             "gbps": b[key], "bytes_in_flight": b["bytes_in_flight"],
                                             "pct_of_copy_engine": (100 * b[key] / ce) if ce else None}  # fmt: skip
    return out


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = entry.parser("sweep", dry_run="CPU: synthetic numbers, JSON + PNG into --out or a temp dir",
                      formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)  # fmt: skip
    ap.add_argument("--ctas", default=None, help=f"CTA counts (default {DEFAULTS['ctas']})")
    ap.add_argument("--per-cta", default=None, help=f"STAGESxCHUNK per CTA, x --ctas (default {DEFAULTS['per_cta']})")
    ap.add_argument("--ldg-blocks", default=None, help=f"upstream blocks per bank (default {DEFAULTS['ldg_blocks']})")
    ap.add_argument("--ce-sizes", default=None, help=f"copy-engine sizes (default {DEFAULTS['ce_sizes']})")
    ap.add_argument("--flat-bytes", default="64M", help="bytes of the flat copy (1 MiB rows; default %(default)s)")
    ap.add_argument("--gather-n", type=int, default=32, help="experts per NVFP4 gather (default %(default)s)")
    ap.add_argument("--samples", type=int, default=3, help="timed sets per measurement (median; default %(default)s)")
    ap.add_argument("--target-ms", type=float, default=10.0, help="length of one timed set (default %(default)s)")
    ap.add_argument("--workers", type=int, default=8, help="parallel JIT builds (default %(default)s)")
    ap.add_argument("--max-configs", type=int, default=0, help="cap the number of rings (0: no cap)")
    ap.add_argument("--quick", action="store_true", help=f"small grid: {QUICK}")
    for what in ("ldg", "ce", "png"):
        ap.add_argument(f"--no-{what}", action="store_true")
    return ap.parse_args(argv)


def plan(args: argparse.Namespace) -> tuple[list[Ring], list[int], list[int]]:
    """(rings, LDG blocks per bank, copy-engine sizes) the arguments ask for."""
    grid = QUICK if args.quick else DEFAULTS
    rings = parse_rings([int(x) for x in (args.ctas or grid["ctas"]).split(",") if x], args.per_cta or grid["per_cta"])
    ldg = [] if args.no_ldg else [int(x) for x in (args.ldg_blocks or grid["ldg_blocks"]).split(",") if x]
    ce_sizes = [] if args.no_ce else [parse_size(x) for x in (args.ce_sizes or grid["ce_sizes"]).split(",") if x]
    return rings[: args.max_configs or None], ldg, ce_sizes


def save(args: argparse.Namespace, doc: dict[str, Any], machine: dict[str, Any], out_dir: str | None,
         keep_replaced: bool = True) -> Path:  # fmt: skip
    """The sweep's document through :func:`suite.results.save` (as its model reads it), its figure beside it
    unless ``--no-png`` (``doc["png"]`` names it; why there is none is logged)."""
    png = results.path("sweep", machine.get("device_slug"), out_dir).with_suffix(".png")
    err = None if args.no_png else render_png({**doc, "machine": machine}, png)
    doc["png"] = None if (args.no_png or err) else png.name
    if err:
        say(err)
    return results.save("sweep", machine=machine, out_dir=out_dir, keep_replaced=keep_replaced,
                        **Sweep.from_doc(doc).to_doc())  # fmt: skip


def dry_run(args: argparse.Namespace, rings: list[Ring], ldg: list[int], ce_sizes: list[int]) -> int:
    doc = synthetic(args, rings, ldg, ce_sizes, 96 * 1024)
    doc["summary"] = summarize(doc)
    out = save(args, doc, {"device_name": "synthetic (dry run)"}, args.out or tempfile.mkdtemp(prefix="sweep-dry-"))
    say(f"dry run: synthetic {len(doc['ring'])} rings, {len(doc['ldg'])} LDG widths, {len(doc['copy_engine'])} CE sizes")
    say(f"wrote {out}" + (f" and {out.with_suffix('.png')}" if doc["png"] else " (no PNG)"))
    return 0


class SweepRun:
    """One sweep on this GPU: the document it fills, saved (partially after a lost context) as it goes."""

    def __init__(self, args: argparse.Namespace, doc: dict[str, Any], t_start: float):
        import torch

        self.torch, self.args, self.doc, self.t_start = torch, args, doc, t_start
        self.info = machine_info()
        self.saves = 0  # the first save keeps the document it replaces; the later (partial) ones replace their own
        self.runner = Runner(args)

    def save(self, partial: bool) -> Path:
        doc = self.doc
        doc.update(summary=summarize(doc), partial=partial, duration_s=round(time.perf_counter() - self.t_start, 1))
        self.saves += 1
        return save(self.args, doc, {**self.info, **doc.get("pcie", {})}, self.args.out, keep_replaced=self.saves == 1)

    def healthy(self) -> bool:
        try:
            self.torch.cuda.synchronize()
            return True
        except Exception as e:  # a sticky error: the context is gone
            say(f"CUDA context lost: {e!r}; saving partial results")
            return False

    def measure(self, kind: str, rec: dict[str, Any], calls) -> bool:
        """Flat and gather GB/s of one config into ``rec``, appended to ``doc[kind]``; False (after saving
        partial results) when a failed measurement left the CUDA context unusable."""
        self.doc[kind].append(rec)  # filled in below
        if rec["error"] is None:
            flat, gather = calls()
            try:
                rec["flat_gbps"] = self.runner.flat(flat)["gbps"]
                rec["gather_gbps"] = self.runner.gather(gather)["gbps"]
            except Exception as e:
                rec["error"] = f"{type(e).__name__}: {str(e)[-300:]}"
                if not self.healthy():
                    self.save(True)
                    return False
        say(f"{kind} {rec.get('tag') or rec['blocks_per_bank']} ({fmt_bytes(rec['bytes_in_flight'])} in flight): flat "
            f"{_g(rec['flat_gbps'])} gather {_g(rec['gather_gbps'])} GB/s"
            + (f"  ERROR {rec['error']}" if rec["error"] else ""))
        return True

    def run(self, ce_sizes: list[int], ldg: list[int], rings: list[Ring]) -> bool:
        r, errors = self.runner, self.doc["errors"]
        for size in ce_sizes:
            self.doc["copy_engine"].append({"bytes": size, **r.copy_engine(size)})
            say(f"copy engine {fmt_bytes(size):>9}: {self.doc['copy_engine'][-1]['gbps']:6.2f} GB/s")
        self.doc["pcie"] = pcie_under_load(r.busy_link)  # an idle link may report a power-saving generation
        todo = [("ldg", ldg_record(b, error=errors.get(f"upstream {UPSTREAM_THREADS}x{b}")),
                 lambda b=b: r.calls(call_upstream, r.fast_index_copy, b)) for b in ldg]  # fmt: skip
        todo += [("ring", ring_record(ring, error=errors.get(f"ring {ring}")),
                  lambda ring=ring: r.calls(call_tma, r.decode_gather, ring)) for ring in rings]  # fmt: skip
        return all(self.measure(kind, rec, calls) for kind, rec, calls in todo)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        rings, ldg, ce_sizes = plan(args)
    except ValueError as exc:  # a grid option spelled otherwise
        say(str(exc))
        return 2
    t_start = time.perf_counter()
    if args.dry_run:
        return dry_run(args, rings, ldg, ce_sizes)
    import torch

    if not torch.cuda.is_available():
        say("no CUDA device: nothing to measure (use --dry-run for the CPU path)")
        return 2
    decode_gather, fast_index_copy = load_kernels()
    doc = empty_doc(args)
    todo = buildable(doc, rings, smem_reason(decode_gather, torch.device("cuda")))
    say(f"{len(todo)} rings ({len(doc['skipped'])} skipped: more shared memory than this GPU gives a block), "
        f"{len(ldg)} LDG widths, {len(ce_sizes)} copy-engine sizes; building {len(todo) + len(ldg)} JIT modules "
        f"in {args.workers} threads")
    t0 = time.perf_counter()
    doc["errors"] = precompile(decode_gather, fast_index_copy, todo, ldg, workers=args.workers, progress=say)
    doc["jit_seconds"] = round(time.perf_counter() - t0, 1)
    sweep = SweepRun(args, doc, t_start)
    if not sweep.run(ce_sizes, ldg, todo):
        return 3
    out, s = sweep.save(False), doc["summary"]
    say(f"copy engine {_g(s.get('copy_engine_gbps'))} GB/s; best ring flat {s.get('best_ring_flat_gbps')}; "
        f"best ring gather {s.get('best_ring_gather_gbps')}")
    say(f"wrote {out}" + (f" and {out.with_suffix('.png')}" if doc["png"] else "") + f" in {doc['duration_s']} s")
    return 0


def _g(x) -> str:
    return "   n/a" if x is None else f"{x:6.2f}"


if __name__ == "__main__":
    sys.exit(main())
