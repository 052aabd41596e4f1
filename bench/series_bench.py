"""Run the series' upstream benchmark (``benchmarks/bench_decode_gather.py``) and keep its JSON.

The benchmark ships in the upstream tree and knows nothing of this repository; this wrapper runs it
from ``.work/upstream`` (after ``nox -s apply build``) and stores what it wrote as an
``series_bench`` result document (schema id, provenance, machine) in ``results/<device>/``.
Extra arguments go to the benchmark (``--ring 8x4x16384``, ``--misses 0 1 2``, ...).

``python -m bench.series_bench [--out DIR] [BENCHMARK ARGS...]`` (default: where :mod:`suite.results` keeps it)
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
from pathlib import Path

from bench import entry
from freetoken_overlay.series import work_repo
from freetoken_overlay.util import Workdir
from gpukit.machine import machine_info
from suite import results
from suite.models import SeriesBench

SCRIPT = Path("benchmarks") / "bench_decode_gather.py"


def fields_of(raw: dict, **extra) -> dict:
    """The benchmark's own JSON as the fields of an ``series_bench`` document (kept under their names)."""
    return {k: v for k, v in raw.items() if k not in ("schema", "machine")} | {"benchmark_schema": raw.get("schema")} | extra


def main(argv: list[str] | None = None) -> int:
    args, rest = entry.parser("series_bench").parse_known_args(argv)
    script = work_repo(Workdir.from_env()) / SCRIPT
    if not script.is_file():
        print(f"[series_bench] {script} is missing: run `nox -s apply` first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="upstream-bench-") as tmp:
        raw_path = Path(tmp) / "raw.json"
        rc = subprocess.run([sys.executable, str(script), "--json", str(raw_path), *rest], check=False).returncode
        raw = results.read_json(raw_path)
    if raw is None:
        print(f"[series_bench] the benchmark wrote no JSON (exit {rc})", file=sys.stderr)
        return rc or 1
    info = machine_info()
    doc = SeriesBench.from_doc(fields_of(raw, exit_code=rc))  # the benchmark's JSON read into the model
    out = results.save("series_bench", machine=info, out_dir=args.out, **doc.to_doc())
    print(f"[series_bench] wrote {out} (benchmark exit {rc})")
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
