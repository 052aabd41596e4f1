"""``python -m bench.e2e {make-checkpoint,run} ...`` (``worker`` is what ``run --fresh-processes`` starts per run)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from bench.e2e import synth
from suite.kernels import SWITCH_ENV
from suite.log import configure


def _positive(text: str) -> int:
    v = int(text)
    if v < 1:
        raise argparse.ArgumentTypeError(f"{text}: must be at least 1")
    return v


def _rate(text: str) -> float:
    v = float(text)
    if not 0.0 < v < 1.0:
        raise argparse.ArgumentTypeError(f"{text}: a miss rate in (0, 1), e.g. 0.1")
    return v


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m bench.e2e", description=__doc__)
    sub = ap.add_subparsers(dest="command", required=True)

    mk = sub.add_parser("make-checkpoint", help="write the synthetic Qwen3.6-35B-A3B-NVFP4-shaped checkpoint",
                        description="Write a seeded random-weight Qwen3_5MoeForCausalLM checkpoint (ModelOpt NVFP4 "
                                    "experts, bf16 dense weights, byte-level tokenizer) into DIR.")  # fmt: skip
    d = synth.SynthSpec()
    mk.add_argument("dir", help="output directory (created; not inside the repository)")
    mk.add_argument("--layers", type=_positive, default=None, help=f"MoE decoder layers (default {d.layers})")
    mk.add_argument("--experts", type=_positive, default=None, help=f"routed experts per layer (default {d.experts})")
    mk.add_argument("--vocab", type=_positive, default=None,
                    help=f"vocabulary (default {d.vocab} at {d.layers} layers, scaled with --layers)")
    mk.add_argument("--zipf", type=float, default=None, help=f"expert popularity skew, 0 = uniform (default {d.zipf})")
    mk.add_argument("--seed", type=int, default=0, help="seed (default 0); same seed + device type = same bytes")
    mk.add_argument("--device", choices=("cuda", "cpu"), default=None, help="where weights are drawn (default: cuda)")
    mk.add_argument("--tiny", action="store_true", help="a few-MB model of the same architecture (tests, smoke runs)")
    mk.add_argument("--force", action="store_true", help="overwrite a checkpoint already in DIR")

    run = sub.add_parser("run", help="the A/B: upstream vs tma and the A/A control, alternating rounds in one process",
                         description="End-to-end A/B through FreeToken's engine; writes <out>/e2e.json.")  # fmt: skip
    run.add_argument("--model", required=True, help="HF-layout checkpoint directory (synthetic or a real NVFP4 one)")
    pts = run.add_mutually_exclusive_group()
    pts.add_argument("--slots", type=_positive, nargs="+", default=None,
                     help="slot counts of the unified expert cache, one point each (a real checkpoint needs these)")
    pts.add_argument("--miss-rate", type=_rate, nargs="+", default=None,
                     help="target misses per expert lookup, one point each, via the generated checkpoint's "
                          "predicted table (default there 0.1; 0.1 0.3 with --fresh-processes)")  # fmt: skip
    run.add_argument("--tokens", type=_positive, default=256, help="decode tokens measured per run (default 256)")
    run.add_argument("--skip", type=int, default=128,
                     help="decode tokens before the measured window: the cache refills after the prefill (default 128)")
    run.add_argument("--repeats", type=_positive, default=None, help="rounds of every kernel in one process "
                     "(default 10); with --fresh-processes, fresh processes per kernel and point (default 3)")
    run.add_argument("--fresh-processes", action="store_true", help="a process per run (several points, --auto; "
                     "the rule 'repeats', no A/A control), not one engine re-capturing its graphs per run")
    run.add_argument("--kv-tokens", type=_positive, default=8192, help="KV capacity in tokens (default 8192)")
    run.add_argument("--auto", action="store_true",
                     help=f"a third kernel, {SWITCH_ENV}=auto (ft bench bw's profile's pick, read at start-up)")
    run.add_argument("--out", default=None, help="directory of e2e.json (default: results/<device>/, suite.results)")
    run.add_argument("--log-dir", default=None, help="worker logs and raw results (default: a new temp dir)")
    run.add_argument("--run-timeout-s", type=_positive, default=420, help="kill a worker after this long (default 420)")
    run.add_argument("--budget-s", type=float, default=None,
                     help="start no run that would end after this many seconds; the JSON says complete: false")
    return ap  # ``worker`` (what ``run`` starts per run) is dispatched before parsing: main()


def make_checkpoint(args: argparse.Namespace) -> int:
    from bench.e2e.checkpoint import make_checkpoint as make

    over = {k: getattr(args, k) for k in ("layers", "experts", "vocab", "zipf") if getattr(args, k) is not None}
    over["seed"] = args.seed  # (the default vocabulary scales with --layers)
    if not args.tiny and "vocab" not in over and "layers" in over:
        over["vocab"] = synth.default_vocab(over["layers"])
    try:
        spec = synth.SynthSpec.tiny(**over) if args.tiny else synth.SynthSpec(**over)
        make(Path(args.dir), spec, device=args.device, force=args.force)
    except (FileExistsError, ValueError) as exc:
        print(f"[e2e] {exc}", file=sys.stderr)
        return 2
    return 0


def main(argv: list[str] | None = None) -> int:
    configure()
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["worker"]:
        from bench.e2e import worker

        return worker.main(argv[1:])
    args = build_parser().parse_args(argv)
    if args.command == "make-checkpoint":
        return make_checkpoint(args)
    from bench.e2e import harness

    return harness.main(args)


if __name__ == "__main__":
    sys.exit(main())
