#!/usr/bin/env python3
"""Run ``conformance.gpu.sanitize_case`` under compute-sanitizer memcheck, racecheck and synccheck; summarize.

    python -m conformance.gpu.run_sanitizer                       # results/<device>/conformance/sanitize.json + logs
    python -m conformance.gpu.run_sanitizer --out DIR             # into DIR instead
    python -m conformance.gpu.run_sanitizer --dry-run [--out DIR]  # CPU: show the commands (and a sample summary)

First the case runs once without a sanitizer (it JIT-builds the modules and must be exact), then
once per tool. The summary holds, per tool, the error count from the tool's closing line, its exit
status, whether the case itself reported every copy exact, and the log file. Exit status 1 when any
tool reports an error, a run lacks its closing summary line, or the case fails; 0 otherwise.
"""

from __future__ import annotations

import argparse
import logging
import re
import subprocess
import sys
import time

from freetoken_overlay.toolchain import find_tool
from suite import results
from suite.models import Sanitize
from gpukit.machine import machine_info
from suite.log import configure

logger = logging.getLogger("conformance.gpu.run_sanitizer")  # its name also when run as __main__

CASE = "conformance.gpu.sanitize_case"  # run as a module from the repository root
TOOLS = ("memcheck", "racecheck", "synccheck")

_ERROR_SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+errors?")
_RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:\s*(\d+)\s+hazards? displayed\s*\((\d+)\s+errors?,\s*(\d+)\s+warnings?\)")


def parse_summary(text: str) -> dict:
    """Errors (and racecheck's hazards/warnings) from compute-sanitizer's closing lines; errors is
    None when no closing line was found (the tool or the process died)."""
    out: dict = {"errors": None, "warnings": 0, "hazards": 0}
    if m := _ERROR_SUMMARY.findall(text):
        out["errors"] = int(m[-1])
    if r := _RACE_SUMMARY.findall(text):
        hazards, errors, warnings = (int(x) for x in r[-1])
        out["hazards"], out["warnings"] = hazards, warnings
        out["errors"] = max(out["errors"] or 0, errors)
    return out


def find_sanitizer(explicit: str | None) -> str | None:
    """``explicit``, else compute-sanitizer in ``freetoken_overlay.toolchain``'s order."""
    return explicit or find_tool("compute-sanitizer")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", help="write sanitize.json and the logs into DIR (default: results/<device>/conformance/)")
    ap.add_argument("--tools", default=",".join(TOOLS))
    ap.add_argument(
        "--sanitizer", help="path of compute-sanitizer (default: $COMPUTE_SANITIZER, $CUDA_HOME/bin, PATH, /usr/local/cuda/bin)"
    )
    ap.add_argument("--case-args", default="", help="extra arguments for sanitize_case.py, e.g. '--kernel both'")
    ap.add_argument("--timeout", type=int, default=900, help="seconds per tool run")
    ap.add_argument("--dry-run", action="store_true",
                    help="print the commands; run nothing (with --out: a sample summary there)")
    args = ap.parse_args(argv)
    configure()

    tools = [t for t in args.tools.split(",") if t]
    case_cmd = [sys.executable, "-m", CASE, *args.case_args.split()]
    san = find_sanitizer(args.sanitizer)
    if args.dry_run:
        logger.info("plain: %s", " ".join(case_cmd))
        for tool in tools:
            logger.info("%s: %s", tool, " ".join([san or "compute-sanitizer", "--tool", tool, "--print-limit", "100", *case_cmd]))
        if args.out:  # a sample summary (not a result)
            logger.info("wrote %s", results.save("sanitize", out_dir=args.out, dry_run=True, passed=True,
                                                 tools={t: {"errors": 0} for t in tools}))  # fmt: skip
        return 0
    if san is None:
        logger.error("run_sanitizer: compute-sanitizer not found ($COMPUTE_SANITIZER, $CUDA_HOME/bin, PATH, /usr/local/cuda/bin)")
        return 2
    info = machine_info()
    target = results.path("sanitize", info.get("device_slug"), args.out)
    out = target.parent
    out.mkdir(parents=True, exist_ok=True)

    summary = Sanitize(sanitizer=san, case=" ".join(case_cmd))
    ver = subprocess.run([san, "--version"], capture_output=True, text=True)
    summary.sanitizer_version = (ver.stdout.strip().splitlines() or [""])[-1]

    t0 = time.perf_counter()
    plain = subprocess.run(case_cmd, capture_output=True, text=True, timeout=args.timeout, cwd=results.REPO_ROOT)
    (out / "sanitizer-plain.log").write_text(plain.stdout + plain.stderr)
    summary.plain = {"exit_code": plain.returncode, "seconds": round(time.perf_counter() - t0, 1)}
    ok = plain.returncode == 0
    logger.info("plain run: exit %s (%s s)", plain.returncode, summary.plain["seconds"])
    for tool in tools:
        cmd = [san, "--tool", tool, "--print-limit", "100", *case_cmd]
        t0 = time.perf_counter()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=args.timeout, cwd=results.REPO_ROOT)
            text, rc = proc.stdout + proc.stderr, proc.returncode
        except subprocess.TimeoutExpired as e:
            text, rc = f"{e.stdout or ''}{e.stderr or ''}\nTIMEOUT after {args.timeout}s", None
        log = out / f"sanitizer-{tool}.log"
        log.write_text(text)  # a str either way (a timeout's partial output formatted into it)
        parsed, case_ok = parse_summary(text), "calls checked, 0 mismatches" in text
        summary.tools[tool] = rec = {**parsed, "exit_code": rc, "case_exact": case_ok,
                                     "seconds": round(time.perf_counter() - t0, 1), "log": log.name}  # fmt: skip
        good = parsed["errors"] == 0 and case_ok
        ok &= good
        logger.info("%s: errors=%s warnings=%s case_exact=%s exit=%s (%s s)%s", tool, parsed["errors"], parsed["warnings"],
                    case_ok, rc, rec["seconds"], "" if good else "  <-- FAIL")  # fmt: skip
    summary.total_errors = sum((r["errors"] or 0) for r in summary.tools.values())
    summary.passed = bool(ok)
    logger.info("wrote %s", results.save("sanitize", machine=info, out_dir=args.out, **summary.to_doc()))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
