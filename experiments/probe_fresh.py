"""Why does the ring pay for fresh miss lists, and does touching the host pages ahead of it fix it?

Decode-regime probe (gpukit.decode_regime): 40-layer captured graphs over the model's full bank
footprint (HostBank: mmap, fill, register), a new miss list before every replay, against the same
graphs with one replayed list. Kernels: upstream fast_index_copy_multi at 8 blocks per bank (twice:
the A/A control) and at 32, decode_gather as installed, and decode_gather with the toucher warp
(``kTouch`` of the installed .cuh: 1 prefetch.global.L2 per 4 KiB page, 2 a load per page, 3 a bulk
L2 prefetch per chunk). Optionally the captured decode step of the real OffloadMoeCache
(``--step``), and other rings of the installed kernel (``--rings``). Writes ``$OUT/probe_fresh.json``.

The toucher warp is not in the series (it did not pay: ``experiments/results/h200/tree-f6d9b53d0132/``); ``--touch`` needs its
kernel, ``ktouch-experiment.patch`` in that folder, committed on top of the series in
``.work/upstream`` before the wheel is built. ``--backing thp|hugetlb`` puts the banks on 2 MiB pages
(experiments.regimes.HugePageBank) to test the cold rows' address translations. Run 1 of session 4 was:

    python -m experiments.probe_fresh --ns 1,0,2,4,8,32 --touch 1,2,3 --step 2
"""

from __future__ import annotations

import argparse
import logging
import functools
import time
from typing import Any

import torch

from experiments import harness, variants
from experiments.labels import UPSTREAM_BPB32, upstream_load
from suite.kernels import Kernel
from experiments.regimes import BACKINGS, REGIME_ORDER, TOUCH_REGIMES, ProbeGraphs, model_banks
from gpukit.decode_regime import Footprint, RegimeGraphs, poisoned_slots, replays_per_set
from gpukit.decode_step import StepVariant
from suite.geometry import UPSTREAM_BLOCKS_PER_BANK, UPSTREAM_THREADS, Ring
from gpukit.kernels import call_upstream, default_ring, load_kernels, precompile, probe_headers
from suite.rounds import run_rounds
from suite.stats import summarize_rounds
from suite.log import configure

logger = logging.getLogger("experiments.probe_fresh")  # its name also when run as __main__


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ns", default="0,1,2,4,8,32")
    ap.add_argument("--touch", default="", help="kTouch values of the installed kernel to add")
    ap.add_argument("--regimes", default="decode,replay", help="also decode_src, decode_dst: new rows or new slots "
                    "only; decode_touch4K, decode_touch64K, decode_touch2M: the new rows' blocks touched first")  # fmt: skip
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--gib", type=float, default=None, help="cap the banks' footprint (default: full model)")
    ap.add_argument("--rings", default="", help="extra rings of the installed kernel, e.g. 32x4x4K,24x4x8K")
    ap.add_argument("--step", default="", help="kTouch values to add to the decode-step A/B (e.g. '2')")
    ap.add_argument("--step-variants", action="store_true", help="add the --tma-variants to the decode-step A/B (runs it)")
    ap.add_argument("--step-rings", default="", help="rings to add to the decode-step A/B (runs it), e.g. 64x4x4K")
    ap.add_argument("--backing", default="hostbank", choices=BACKINGS,
                    help="the banks' pages: FreeToken's HostBank (4 KiB), or 2 MiB pages (thp, hugetlb)")
    ap.add_argument("--name", default="probe_fresh.json", help="file written under $OUT")
    ap.add_argument("--interleave", action="store_true", help="time every kernel in every regime in each round "
                    "(ratios against upstream in the decode regime), so the regimes share the host's noise")  # fmt: skip
    ap.add_argument("--tma-variants", default="", help="decode_gather variants of experiments.variants to add, "
                    "e.g. hybrid1,hybrid2 (built with the default ring)")  # fmt: skip
    ap.add_argument("--upstream-loads", default="", help="upstream kernel variants of experiments.variants."
                    "UPSTREAM_LOADS to add, e.g. nc,nc_l2_256")  # fmt: skip
    args = ap.parse_args(argv)
    assert all(r in REGIME_ORDER for r in _list(args.regimes)), args.regimes
    assert not args.interleave or "decode" in _list(args.regimes), "--interleave compares every regime with decode"
    return args


def _list(csv: str) -> list[str]:
    return [x for x in csv.split(",") if x]


class Modules:
    """The probe's JIT modules, built up front: the touch variants, upstream's row loads, the ring variants."""

    def __init__(self, args: argparse.Namespace, dgm, fic, ring):
        from freetoken.kernel.utils import KERNEL_PATH

        self.ring, self.touches, self.loads = ring, [int(x) for x in _list(args.touch)], _list(args.upstream_loads)
        self.mods: dict[int, object] = {}
        self.fic_mods: dict[str, object] = {}
        self.var_mods: dict[str, object] = {}
        self.var_files, self.var_texts, skipped = variants.make(KERNEL_PATH / "jit", _list(args.tma_variants))
        assert not skipped, skipped
        extra = {f"touch{t}": (lambda t=t: self.mods.setdefault(t, self.touch_module(t)))
                 for t in sorted(set(self.touches) | {int(x) for x in _list(args.step)})}  # fmt: skip
        extra.update({upstream_load(x): (lambda x=x: self.fic_mods.setdefault(x, self.fic_module(x))) for x in self.loads})
        extra.update({f"dg_{v}": (lambda v=v: self.var_module(v)) for v in self.var_files})
        errors = precompile(dgm, fic, [Ring.parse(r) for r in _list(args.rings)], upstream_blocks=(8, 32), extra=extra,
                            progress=logger.info)  # fmt: skip
        assert not errors, errors

    def touch_module(self, t: int):
        from freetoken.kernel.utils import load_jit, make_cpp_args

        a = make_cpp_args(*self.ring, t)
        return load_jit("decode_gather_touch", *a, cuda_files=["decode_gather.cuh"],
                        cuda_wrappers=[("launch", f"&DecodeGatherKernel<{a}>::run")])  # fmt: skip

    def fic_module(self, name: str):  # upstream's kernel (1024 x 8 per bank) with another row load
        from freetoken.kernel.utils import KERNEL_PATH, load_jit, make_cpp_args

        text = variants.upstream_load_variant((KERNEL_PATH / "jit" / "fast_index_copy.cuh").read_text(), name)
        a = make_cpp_args(UPSTREAM_THREADS, UPSTREAM_BLOCKS_PER_BANK)
        with probe_headers({f"fic_{name}.cuh": text}):
            return load_jit(f"fic_{name}", *a, cuda_files=[f"fic_{name}.cuh"],
                            cuda_wrappers=[("launch", f"&MultiIndexCopyKernel<{a}>::run")])  # fmt: skip

    def var_module(self, v: str):
        with probe_headers({self.var_files[v]: self.var_texts[self.var_files[v]]}):
            return self.var_mods.setdefault(v, variants.load(self.var_files, v, self.ring))


def probe_kernels(dgm, fic, m: Modules, rings: list[Ring]) -> dict[str, Any]:
    """{label: launch} of every kernel the probe times (upstream twice: the A/A control)."""

    def upstream(bpb: int):
        return functools.partial(call_upstream, fic, blocks_per_bank=bpb)

    def mod(module):
        return functools.partial(harness.call_module, module)

    kernels = {Kernel.UPSTREAM: upstream(8), Kernel.UPSTREAM_AA: upstream(8), UPSTREAM_BPB32: upstream(32),
               Kernel.TMA: mod(dgm.decode_gather_module(*m.ring))}  # fmt: skip
    kernels.update({f"tma+t{t}": mod(m.mods[t]) for t in m.touches})
    kernels.update({f"tma_{r.tag}": mod(dgm.decode_gather_module(*r)) for r in rings})
    kernels.update({f"tma_{v}": mod(m.var_mods[v]) for v in m.var_files})
    # a fast_index_copy_multi variant's launch also takes the wait flag (0: none)
    kernels.update({upstream_load(x): lambda *a, mm=m.fic_mods[x]: harness.call_module(mm, *a, 0) for x in m.loads})
    return kernels


def probe_n(args: argparse.Namespace, n: int, banks, slots, fp, fic, kernels: dict[str, Any]) -> dict[str, Any]:
    """Every kernel at ``n`` misses per layer, per regime (or interleaved): one entry of ``per_n``."""
    regimes = _list(args.regimes)
    rg = ProbeGraphs(banks, slots, n, layers=fp.layers if n <= 32 else 4)
    for name, fn in kernels.items():
        rg.capture(name, fn)
    entry: dict = {"layers": rg.layers}
    if args.interleave:
        entry["interleaved"] = interleaved(rg, fic, kernels, regimes, args.rounds)
    for regime, (timed_as, touch) in ({} if args.interleave else how_timed(rg, fic, regimes)).items():
        rounds = rg.rounds(list(kernels), timed_as, args.rounds, replays_per_set(n), prepare=touch).values
        summ = {k: summarize_rounds(rounds, candidate=k, base=Kernel.UPSTREAM, aa=Kernel.UPSTREAM_AA)
                for k in kernels if k not in (Kernel.UPSTREAM, Kernel.UPSTREAM_AA)}  # fmt: skip
        entry[regime] = {"rounds_us": rounds, "summary": summ}
        us = {k: harness.median(v) for k, v in rounds.items()}
        aa = summ[Kernel.TMA]["aa_spread"]
        logger.info(f"n={n:3d} {regime:6s} {Kernel.UPSTREAM} {us[Kernel.UPSTREAM]:8.2f} us  A/A +-{aa:.4f}  "
              + "  ".join(f"{k} {s['speedup_paired']:.4f}" for k, s in summ.items()))  # fmt: skip
    entry["verified_replays"] = rg.verified
    return entry


def step_variants(args: argparse.Namespace, m: Modules) -> list[StepVariant]:
    """The decode-step A/B's variants (none: no step asked for)."""
    step_rings = [Ring.parse(r) for r in _list(args.step_rings)]
    if not (args.step or step_rings or (args.step_variants and m.var_mods)):
        return []
    specs = [StepVariant(Kernel.UPSTREAM), StepVariant(Kernel.UPSTREAM_AA),
             StepVariant(Kernel.TMA, {"FREETOKEN_DECODE_GATHER": "tma"})]
    specs += [StepVariant(f"tma+t{t}", {"FREETOKEN_DECODE_GATHER": "tma"}, module=m.mods[int(t)])
              for t in _list(args.step)]  # fmt: skip
    specs += [StepVariant(f"tma_{r.tag}", {"FREETOKEN_DECODE_GATHER": "tma", "FREETOKEN_DECODE_GATHER_RING": r.env})
              for r in step_rings]  # fmt: skip
    if args.step_variants:
        specs += [StepVariant(f"tma_{v}", {"FREETOKEN_DECODE_GATHER": "tma"}, module=mm)
                  for v, mm in m.var_mods.items()]  # fmt: skip
    return specs


def main(argv: list[str] | None = None) -> None:
    configure()
    args = parse_args(argv)
    rings = [Ring.parse(r) for r in _list(args.rings)]
    dgm, fic = load_kernels()
    m = Modules(args, dgm, fic, default_ring(dgm))
    dev = torch.device("cuda")
    fp = Footprint.scaled(args.gib)
    t0 = time.perf_counter()
    banks, pages = model_banks(fp, dev, args.backing, progress=logger.info)
    logger.info(f"bank pages: {pages}")
    slots = poisoned_slots(fp.row_bytes, dev)
    log: dict = {"footprint": fp.describe(), "ring": list(m.ring), "touch": m.touches, "rings": [r.tag for r in rings],
                 "bank_setup_s": time.perf_counter() - t0, "bank_pages": pages, "per_n": {}}  # fmt: skip
    kernels = probe_kernels(dgm, fic, m, rings)
    for n in [int(x) for x in _list(args.ns)]:
        log["per_n"][n] = probe_n(args, n, banks, slots, fp, fic, kernels)
        harness.save(log, args.name)  # after every n: a run cut short still leaves its figures
    slots = None
    banks.close()
    specs = step_variants(args, m)
    if specs:
        log["step"] = harness.decode_step(specs, rounds=9)
        harness.print_step(log["step"])
    harness.save(log, args.name)


def how_timed(rg: RegimeGraphs, fic, regimes: list[str]) -> dict[str, tuple[str, object]]:
    """{label: (regime RegimeGraphs.time_set takes, its prepare hook or None)}: a touch label is the
    decode regime with its page toucher."""
    return {reg: ("decode", harness.page_toucher(fic, rg, TOUCH_REGIMES[reg])) if reg in TOUCH_REGIMES else (reg, None)
            for reg in regimes}  # fmt: skip


def interleaved(rg: RegimeGraphs, fic, kernels: dict, regimes: list[str], rounds: int) -> dict:
    """Every kernel in every regime as one variant ``kernel@regime`` of the same alternating rounds, each
    summarised against ``upstream@decode`` with ``upstream_aa@decode`` as the A/A control: what a regime (a page
    touch, a replayed list) changes, free of the host's slow drifts between regimes run one after another."""
    how = how_timed(rg, fic, regimes)
    reps = replays_per_set(rg.n)
    sets = {f"{k}@{reg}": (lambda _r, k=k, reg=reg: rg.time_set(k, how[reg][0], reps, prepare=how[reg][1]))
            for reg in regimes for k in kernels}  # fmt: skip
    base, aa = f"{Kernel.UPSTREAM}@decode", f"{Kernel.UPSTREAM_AA}@decode"
    times = run_rounds(sets, rounds, base=base, aa=aa).values
    summ = {lab: summarize_rounds(times, candidate=lab, base=base, aa=aa) for lab in sets if lab != aa}
    for reg in regimes:
        logger.info(f"n={rg.n:3d} {reg:16s} " + "  ".join(f"{k} {harness.median(times[f'{k}@{reg}']):8.2f} us x{summ[f'{k}@{reg}']['speedup_paired']:.4f}"
                                                    for k in kernels if f"{k}@{reg}" in summ))  # fmt: skip
    logger.info(f"n={rg.n:3d} A/A +-{summ[base]['aa_spread']:.4f} (ratios: {base} / kernel@regime, paired)")
    return {"regimes": regimes, "kernels": list(kernels), "rounds_us": times, "summary": summ}


if __name__ == "__main__":
    main()
