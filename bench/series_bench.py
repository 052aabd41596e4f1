"""Run the series' upstream benchmark (``benchmarks/bench_decode_gather.py``) and keep its JSON.

The benchmark ships in the upstream tree and knows nothing of this repository; this wrapper runs it
from ``.work/upstream`` (after ``nox -s apply build``) and stores what it wrote as an
``series_bench`` result document (schema id, provenance, machine) in ``results/<device>/``.
Extra arguments go to the benchmark (``--model all``, ``--rings``, ``--misses 0 1 2``, ...). With
``--markdown`` the benchmark's Markdown table is printed and kept beside the JSON as ``series_bench.md``,
its first line an HTML comment with the provenance (invisible once pasted).

``python -m bench.series_bench [--out DIR] [--markdown] [BENCHMARK ARGS...]`` (default: where :mod:`suite.results` keeps it)
"""

from __future__ import annotations

import logging
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import entry
from freetoken_overlay.series import work_repo
from freetoken_overlay.util import Workdir
from suite import results
from suite.models.docs import ring_choice

SCRIPT = Path("benchmarks") / "bench_decode_gather.py"
log = logging.getLogger("bench.series_bench")


def fields_of(raw: dict, **extra) -> dict:
    """The benchmark's own JSON as the fields of a ``series_bench`` document (kept under their names), with the
    ring sweep's choice (:func:`suite.models.docs.ring_choice`) where the benchmark records none."""
    choice = None if "ring_choice" in raw else ring_choice(raw)
    kept = {k: v for k, v in raw.items() if k not in ("schema", "machine")} | {"benchmark_schema": raw.get("schema")}
    return kept | ({"ring_choice": choice} if choice else {}) | extra


def main(argv: list[str] | None = None) -> int:
    ap = entry.parser("series_bench")
    ap.add_argument("--markdown", action="store_true", help="also keep the benchmark's table as series_bench.md")
    args, rest = ap.parse_known_args(argv)
    script = work_repo(Workdir.from_env()) / SCRIPT
    if not script.is_file():
        log.error("%s is missing: run `nox -s apply` first", script)
        return 2
    with tempfile.TemporaryDirectory(prefix="upstream-bench-") as tmp:
        raw_path, md_path = Path(tmp) / "raw.json", Path(tmp) / "table.md"
        md = ["--markdown", str(md_path)] if args.markdown else []
        rc = subprocess.run([sys.executable, str(script), "--json", str(raw_path), *md, *rest], check=False).returncode
        raw = results.read_json(raw_path)
        table = md_path.read_text() if md_path.is_file() else None
    if raw is None:
        log.error("the benchmark wrote no JSON (exit %d)", rc)
        return rc or 1
    entry.save("series_bench", args, fields_of(raw, exit_code=rc), markdown=table)  # the table beside it: .md
    if table is not None:
        print(table)
    return rc


if __name__ == "__main__":
    raise SystemExit(main())
