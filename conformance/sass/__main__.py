"""``python -m conformance.sass``: scan a ``.cu`` (default: freetoken's decode_gather) for each arch,
print the table, and optionally write the reports, record ``results/sass.json`` and apply the contract."""

from __future__ import annotations

import argparse
import json
import logging
import pathlib
import sys
import tempfile
from typing import Sequence

from conformance.sass.build import DEFAULT_ARCHS, CompileError, ToolNotFound, decode_gather_default_ring
from conformance.sass.build import decode_gather_include_dirs, decode_gather_source, require_disassembler, require_nvcc
from conformance.sass.contract import decode_gather_violations
from conformance.sass.report import format_table, scan_many
from suite.geometry import Ring
from suite.log import configure

logger = logging.getLogger("conformance.sass")


def _parse_archs(values: list[str] | None) -> list[int]:
    if not values:
        return list(DEFAULT_ARCHS)
    parts = (p.strip().lower().removeprefix("sm_") for value in values for p in value.replace(" ", ",").split(","))
    return [int(p) for p in parts if p]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m conformance.sass", description=__doc__.split("\n\n")[0].strip('`'),
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("--arch", action="append", help="sm arch(s): 90, sm_90, or 80,90,100,120 (repeatable; default: all four)")
    parser.add_argument("--source", help="a .cu to scan (default: freetoken's decode_gather kernel, default ring)")
    parser.add_argument("--ring", type=Ring.parse, help="decode_gather ring, e.g. 8x3x16384 (default: default_ring())")
    parser.add_argument("-I", "--include", action="append", default=[], help="extra include directory")
    parser.add_argument("--flag", action="append", default=[], help="extra nvcc flag (repeatable)")
    parser.add_argument("--out", help="write the full reports (paths, ptxas logs) as JSON here")
    parser.add_argument("--save", action="store_true", help="record the reports as results/sass.json (suite.results)")
    parser.add_argument("--build-dir", help="keep the .cu and cubins here (default: a temporary directory)")
    parser.add_argument("--jobs", type=int, default=2, help="nvcc processes at a time (default 2)")
    parser.add_argument("--check", action="store_true", help="apply the decode_gather contract; exit 1 on a violation")
    args = parser.parse_args(argv)

    configure()
    archs = _parse_archs(args.arch)
    try:
        nvcc, disassembler = require_nvcc(), require_disassembler()
        with tempfile.TemporaryDirectory(prefix="conformance-sass-") as tmp:
            build = pathlib.Path(args.build_dir or tmp)
            build.mkdir(parents=True, exist_ok=True)
            includes = list(args.include)
            if args.source:
                source = pathlib.Path(args.source)
            else:
                ring = args.ring or Ring(*decode_gather_default_ring())
                source = build / f"decode_gather_{ring}.cu"
                source.write_text(decode_gather_source(ring))
                includes = decode_gather_include_dirs() + includes
            reports = scan_many(source, archs, build, jobs=args.jobs, include_dirs=includes, extra_flags=args.flag,
                                nvcc=nvcc, disassembler=disassembler)  # fmt: skip
    except (ToolNotFound, LookupError, CompileError) as exc:
        logger.error("conformance.sass: %s", exc)
        return 2
    ordered = [reports[a] for a in archs]
    print(format_table(ordered))
    if args.out:
        out = pathlib.Path(args.out)
        out.parent.mkdir(parents=True, exist_ok=True)
        out.write_text(json.dumps({"reports": [r.record(full=True) for r in ordered]}, indent=2) + "\n")
        logger.info("wrote %s", out)
    if args.save:
        from suite import results

        ring = None if args.source else ring._asdict()
        logger.info("wrote %s", results.save("sass", ring=ring, reports=[r.record() for r in ordered]))
    if args.check:
        problems = [p for r in ordered for p in decode_gather_violations(r)]
        for p in problems:
            logger.error("VIOLATION %s", p)
        if problems:
            return 1
        logger.info("decode_gather SASS contract: OK on %s", ", ".join(f"sm_{a}" for a in archs))
    return 0


if __name__ == "__main__":
    sys.exit(main())