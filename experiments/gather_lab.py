"""Issue 52's lab: where a one-miss-a-layer gather spends its time, and which ring changes win it back.

    python -m experiments.gather_lab --out DIR [--ns 1,2,4] [--rounds 11] [--timeline-ns 1,4]

Exploration, not a verdict (experiments/README.md). On the GPU machine, after ``nox -s apply build`` with
``FT_OVERLAY_KERNEL_SET=full`` (so upstream's 1024 x 8 kernel and the series' ring load prebuilt), run with
``.nox/patched/bin/python`` and ``FREETOKEN_KERNEL_CACHE_DIR=$PWD/.work/kernel-cache``. It:

1. reads ``%globaltimer`` back to back on the GPU (its granularity bounds every stamp below);
2. lays qwen3.6-35B-A3B's six NVFP4 banks at full depth as FreeToken's HostBank does (gpukit.decode_regime);
3. per n, captures 40-layer graphs of upstream's installed kernel (twice: the A/A control), the series' ring
   (``tma``) and the lab's kernels of ``experiments/gather_lab.cu`` (nvcc -> cubin, launched through cupy on
   torch's stream), and runs paired alternating rounds in the decode regime (a new miss list before every
   replay, every replay verified byte-exact): ratio = upstream / kernel, > 1 = faster than upstream;
4. per n in ``--timeline-ns``, replays stamped graphs (the replicas with ``kStamp``) and tables, per CTA, the
   entry, the miss count known, the first load issued and arrived, the last arrival, the exit and the bytes;
   per layer, the gap from the previous kernel's last exit.

Writes ``DIR/gather_lab.json`` and logs to stderr.
"""

from __future__ import annotations

import argparse
import json
import logging
import statistics
import subprocess
import tempfile
from pathlib import Path

log = logging.getLogger("gather_lab")
SRC = Path(__file__).with_name("gather_lab.cu")
STAMPS = ("entry", "count", "first_issue", "first_arrival", "last_arrival", "exit", "bytes", "units", "table",
          "barriers", "cursor", "row0_ids")
EVENTS = ("entry", "count", "first_issue", "first_arrival", "last_arrival", "exit", "table", "barriers", "cursor",
          "row0_ids")

#: the lab's kernels: name -> (kind, template arguments, threads, ctas or blocks per bank, ring bytes)
#: ring args: ctas, stages, chunk, stamp, read_wait, lane_prologue, early (0 no, 1 from the scan, 2 fast); ldg args: threads, blocks_per_bank, stamp
LAB = {
    "ring_8x3x16K": ("ring", (8, 3, 16384, 0, 0, 0, 0)),
    "ring_16x4x8K": ("ring", (16, 4, 8192, 0, 0, 0, 0)),
    "ring_16x4x8K_lane": ("ring", (16, 4, 8192, 0, 0, 1, 0)),
    "ring_8x3x16K_early": ("ring", (8, 3, 16384, 0, 0, 0, 1)),
    "ring_16x4x8K_early": ("ring", (16, 4, 8192, 0, 0, 0, 1)),
    "ring_20x4x8K_early": ("ring", (20, 4, 8192, 0, 0, 0, 1)),
    "ring_16x4x16K_early": ("ring", (16, 4, 16384, 0, 0, 0, 1)),
    "ring_8x3x16K_fast": ("ring", (8, 3, 16384, 0, 0, 0, 2)),
    "ring_16x4x8K_fast": ("ring", (16, 4, 8192, 0, 0, 0, 2)),
}
STAMPED = {
    "ldg_stamped": ("ldg", (1024, 8, 1)),
    "ring_8x3x16K_stamped": ("ring", (8, 3, 16384, 1, 0, 0, 0)),
    "ring_16x4x8K_stamped": ("ring", (16, 4, 8192, 1, 0, 0, 0)),
    "ring_16x4x8K_early_stamped": ("ring", (16, 4, 8192, 1, 0, 0, 1)),
    "ring_8x3x16K_early_stamped": ("ring", (8, 3, 16384, 1, 0, 0, 1)),
    "ring_8x3x16K_fast_stamped": ("ring", (8, 3, 16384, 1, 0, 0, 2)),
}


def _symbol(kind: str, args: tuple) -> str:
    return f"lab_{kind}_" + "_".join(str(a) for a in args)


def _wrapper(kind: str, args: tuple) -> str:
    bounds = "32, 1" if kind == "ring" else str(args[0])
    if kind == "ldg":
        tmpl = f"{args[0]}, {args[1]}, {'true' if args[2] else 'false'}"
    else:
        c, s, k, *flags = args
        *bools, early = flags  # stamp, read_wait, lane_prologue: bool; early: 0, 1 (from the scan) or 2 (fast)
        tmpl = f"{c}, {s}, {k}, " + ", ".join("true" if f else "false" for f in bools) + f", {early}"
    return (f'extern "C" __global__ __launch_bounds__({bounds}) void {_symbol(kind, args)}(RING_ARGS) '
            f"{{ lab::{kind}_body<{tmpl}>(CALL_ARGS); }}\n")  # fmt: skip


def build(kernels: dict, arch: str = "sm_90a", workdir: Path | None = None) -> Path:
    """One cubin of gather_lab.cu with an extern "C" entry per kernel (nvcc; no GPU needed)."""
    workdir = Path(workdir or tempfile.mkdtemp(prefix="gather_lab-"))
    workdir.mkdir(parents=True, exist_ok=True)
    cu = workdir / "lab.cu"
    cu.write_text(SRC.read_text() + "".join(_wrapper(k, a) for k, a in kernels.values()))
    cubin = workdir / "lab.cubin"
    subprocess.run(["nvcc", "-std=c++17", f"-arch={arch}", "-O3", "-cubin", "-o", str(cubin), str(cu)], check=True)
    return cubin


class LabKernels:
    """The cubin's entries as harness launches ``launch(slots, src_ptrs, dst, src, num)`` on torch's stream."""

    def __init__(self, cubin: Path, kernels: dict):
        import cupy

        self.cupy = cupy
        self.module = cupy.RawModule(path=str(cubin))
        self.kernels = kernels
        self.stamps = None  # a torch int64 tensor [layers, ctas, 8] while stamping
        self.layer_of: dict[int, int] = {}

    def grid(self, name: str, banks: int) -> tuple[int, int, int]:
        kind, a = self.kernels[name]
        if kind == "ldg":
            return banks * a[1], a[0], 0
        return a[0], 32, a[1] * a[2]

    def launch(self, name: str):
        import numpy as np
        import torch

        kind, a = self.kernels[name]
        fn = self.module.get_function(_symbol(kind, a))
        u64 = np.uint64
        if kind == "ring" and a[1] * a[2] > 48 * 1024 - 1024:  # opt in once, outside any capture
            fn.max_dynamic_shared_size_bytes = a[1] * a[2]

        def run(slots, src_ptrs, dst, src, num) -> None:
            grid, block, smem = self.grid(name, len(slots.row_bytes))
            st = 0
            if self.stamps is not None:
                st = self.stamps[self.layer_of[src_ptrs.data_ptr()]].data_ptr()
            args = (u64(slots.dst_ptrs.data_ptr()), u64(src_ptrs.data_ptr()), u64(slots.feat.data_ptr()),
                    u64(dst.data_ptr()), u64(src.data_ptr()), u64(num.data_ptr()), np.int64(dst.numel()),
                    np.int32(len(slots.row_bytes)), u64(st))  # fmt: skip
            stream = self.cupy.cuda.ExternalStream(torch.cuda.current_stream().cuda_stream)
            fn((grid,), (block,), args, shared_mem=smem, stream=stream)

        return run


def clock_granularity(lab: LabKernels, reads: int = 4096) -> dict:
    import torch

    out = torch.zeros(reads, dtype=torch.int64, device="cuda")
    lab.module.get_function("clock_probe")((1,), (32,), (out.data_ptr(), reads))
    torch.cuda.synchronize()
    t = out.cpu().tolist()
    steps = [b - a for a, b in zip(t, t[1:]) if b != a]
    return {"reads": reads, "distinct": len(set(t)), "span_ns": t[-1] - t[0],
            "step_ns_min": min(steps) if steps else None, "step_ns_median": statistics.median(steps) if steps else None}


def timeline(graphs, lab: LabKernels, banks, names: list[str], replays: int) -> dict:
    """Per stamped kernel: per-layer medians (relative to that layer's first CTA entry) and one layer's CTAs."""
    import torch

    layers = graphs.layers
    lab.layer_of = {p.data_ptr(): i for i, p in enumerate(banks.src_ptrs[:layers])}
    out = {}
    for name in names:
        ctas = lab.grid(name, len(graphs.slots.row_bytes))[0]
        lab.stamps = torch.zeros((layers, ctas, 12), dtype=torch.int64, device="cuda")
        graphs.capture(name, lab.launch(name))
        rows = []
        for _ in range(replays):
            graphs.next_list()
            lab.stamps.zero_()
            graphs.graphs[name].replay()
            torch.cuda.synchronize()
            rows.append(lab.stamps.cpu().clone())
            graphs.verify(name)
        graphs.check_clean(name)
        lab.stamps = None
        out[name] = summarize(torch.stack(rows), ctas)  # [replays, layers, ctas, 12]
        log.info("%s: %s", name, json.dumps(out[name]["per_layer"]))
    return out


def summarize(st, ctas: int) -> dict:
    """Stamps [replays, layers, ctas, 12] -> medians over replays and layers of each CTA event, in ns after the
    layer's first entry, the kernel's span and the gap from the previous layer's last exit."""
    med = statistics.median
    R, L = st.shape[0], st.shape[1]
    t0 = st[..., 0].min(dim=2).values  # [R, L] first entry per kernel
    ev = {}
    for i, key in ((STAMPS.index(k), k) for k in EVENTS):
        rel = st[..., i] - t0[..., None]
        valid = st[..., i] > 0
        ev[key] = [[rel[r, l][valid[r, l]].tolist() for l in range(L)] for r in range(R)]
    exit_max = [[max(ev["exit"][r][l]) for l in range(L)] for r in range(R)]
    per_layer = {
        "span_ns": med(x for row in exit_max for x in row),
        "gap_from_previous_exit_ns": med((t0[r, l] - (t0[r, l - 1] + exit_max[r][l - 1])).item()
                                         for r in range(R) for l in range(1, L)),  # fmt: skip
    }
    for key in ("count", "row0_ids", "table", "barriers", "cursor", "first_issue", "first_arrival"):
        vals = [min(ev[key][r][l]) for r in range(R) for l in range(L) if ev[key][r][l]]
        per_layer[f"{key}_first_cta_ns"] = med(vals) if vals else None
    vals = [max(ev["last_arrival"][r][l]) for r in range(R) for l in range(L) if ev["last_arrival"][r][l]]
    per_layer["last_arrival_ns"] = med(vals) if vals else None
    per_layer["drain_ns"] = per_layer["span_ns"] - per_layer["last_arrival_ns"] if vals else None
    # one table: per CTA, medians over replays and layers
    per_cta = []
    for c in range(ctas):
        row = {"cta": c}
        for i, key in enumerate(STAMPS):
            x = st[:, :, c, i]
            if key in EVENTS:
                x = torch_rel(x, t0)
            x = [v for v in x.reshape(-1).tolist() if v > 0 or i == 0]
            row[key] = med(x) if x else None
        per_cta.append(row)
    return {"replays": R, "layers": L, "per_layer": per_layer, "per_cta": per_cta}


def torch_rel(x, t0):
    return (x - t0).where(x > 0, x.new_zeros(()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--ns", default="1,2,4")
    ap.add_argument("--timeline-ns", default="1,4")
    ap.add_argument("--rounds", type=int, default=11)
    ap.add_argument("--reps", type=int, default=16)
    ap.add_argument("--layers", type=int, default=40)
    ap.add_argument("--only", default="", help="comma-separated lab kernels (default: all)")
    args = ap.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    import torch

    from gpukit.decode_regime import Footprint, ModelBanks, RegimeGraphs, poisoned_slots
    from gpukit.launch import call_tma, call_upstream, load_kernels
    from gpukit.machine import machine_info

    args.out.mkdir(parents=True, exist_ok=True)
    lab_set = {k: v for k, v in LAB.items() if not args.only or k in args.only.split(",")}
    kernels = {**lab_set, **STAMPED}
    lab = LabKernels(build(kernels), kernels)
    doc: dict = {"machine": machine_info(), "clock": clock_granularity(lab), "kernels": {k: list(v[1]) for k, v in kernels.items()}}
    log.info("globaltimer: %s", doc["clock"])
    dg, fic = load_kernels()
    banks = ModelBanks(Footprint(layers=args.layers), "cuda", progress=log.info)
    slots = poisoned_slots(banks.fp.row_bytes, "cuda")
    doc["footprint"] = banks.fp.describe()
    doc["rounds"], doc["timeline"] = {}, {}
    for n in [int(x) for x in args.ns.split(",") if x]:
        g = RegimeGraphs(banks, slots, n, layers=args.layers)
        g.capture("upstream", lambda *a: call_upstream(fic, *a))
        g.capture("upstream_aa", lambda *a: call_upstream(fic, *a))
        g.capture("tma", lambda *a: call_tma(dg, *a))
        for name in lab_set:
            try:
                g.capture(name, lab.launch(name))
            except AssertionError as e:  # a lab kernel that copies wrong bytes is reported and left out
                log.error("n=%d %s: %s", n, name, e)
                doc.setdefault("wrong", {}).setdefault(name, []).append(n)
        names = ["upstream", "upstream_aa", "tma", *(k for k in lab_set if k in g.graphs)]
        r = g.rounds(names, "decode", args.rounds, args.reps, base="upstream", aa="upstream_aa")
        us = {k: statistics.median(v) for k, v in r.values.items()}
        doc["rounds"][n] = {"us_per_layer": us, "comparisons": {k: c.to_doc() for k, c in r.summaries().items()},
                            "verified_replays": g.verified}  # fmt: skip
        for k, c in r.summaries().items():
            log.info("n=%d %-26s %.2f us  upstream/kernel %.4f (A/A %.4f) %s", n, k, us[k], c.ratio or 0,
                     c.aa_spread or 0, c.verdict)  # fmt: skip
        log.info("n=%d upstream %.2f us", n, us["upstream"])
        if str(n) in args.timeline_ns.split(","):
            doc["timeline"][n] = timeline(g, lab, banks, list(STAMPED), replays=8)
        (args.out / "gather_lab.json").write_text(json.dumps(doc, indent=1, default=str))
        del g
        torch.cuda.empty_cache()
    banks.close()
    log.info("wrote %s", args.out / "gather_lab.json")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
