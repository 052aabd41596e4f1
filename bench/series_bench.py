"""Run the series' upstream benchmark (``benchmarks/bench_decode_gather.py``) and keep its JSON.

The benchmark ships in the upstream tree and knows nothing of this repository; this wrapper runs it
from ``.work/upstream`` (after ``nox -s apply build``) and stores what it wrote as an
``series_bench`` result document (schema id, provenance, machine) in ``results/<device>/``.
Extra arguments go to the benchmark (``--model all``, ``--rings``, ``--misses 0 1 2``, ...). With
``--markdown`` the benchmark's comment is printed and kept beside the JSON as ``series_bench.md``,
its first line an HTML comment with the provenance (invisible once pasted).

``python -m bench.series_bench [--out DIR] [--markdown] [BENCHMARK ARGS...]`` (default: where :mod:`suite.results` keeps it)
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from pathlib import Path

from bench import entry
from freetoken_overlay.series import work_repo
from freetoken_overlay.util import Workdir
from gpukit.machine import machine_info
from suite import results

SCRIPT = Path("benchmarks") / "bench_decode_gather.py"


def fields_of(raw: dict, **extra) -> dict:
    """The benchmark's own JSON as the fields of a ``series_bench`` document (kept under their names)."""
    return {k: v for k, v in raw.items() if k not in ("schema", "machine")} | {"benchmark_schema": raw.get("schema")} | extra


def main(argv: list[str] | None = None) -> int:
    ap = entry.parser("series_bench")
    ap.add_argument("--markdown", action="store_true", help="also keep the benchmark's comment as series_bench.md")
    args, rest = ap.parse_known_args(argv)
    script = work_repo(Workdir.from_env()) / SCRIPT
    if not script.is_file():
        print(f"[series_bench] {script} is missing: run `nox -s apply` first", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory(prefix="upstream-bench-") as tmp:
        raw_path, md_path = Path(tmp) / "raw.json", Path(tmp) / "comment.md"
        md = ["--markdown", str(md_path)] if args.markdown else []
        rc = subprocess.run([sys.executable, str(script), "--json", str(raw_path), *md, *rest], check=False).returncode
        raw = results.read_json(raw_path)
        comment = md_path.read_text() if md_path.is_file() else None
    if raw is None:
        print(f"[series_bench] the benchmark wrote no JSON (exit {rc})", file=sys.stderr)
        return rc or 1
    info = machine_info()
    out = results.save("series_bench", machine=info, out_dir=args.out, **fields_of(raw, exit_code=rc))
    print(f"[series_bench] wrote {out} (benchmark exit {rc})")
    if comment is not None:
        print(comment)
        md_out = save_comment(out, comment)
        print(f"[series_bench] wrote {md_out}")
    return rc


def save_comment(json_path: Path, comment: str) -> Path:
    """The comment beside its document, first line the document's provenance as an HTML comment."""
    doc = results.read_json(json_path) or {}
    p = doc.get("provenance") or {}
    head = (f"<!-- {json_path.name} of {doc.get('generated_at')}: series {p.get('series_hash')} "
            f"({p.get('series_from')}), tree {p.get('tree')}, patch-id {p.get('patch_id')} -->")  # fmt: skip
    target = json_path.with_suffix(".md")
    _keep_replaced(target, head + "\n" + comment)
    target.write_text(head + "\n" + comment)
    return target


def _keep_replaced(target: Path, new: str) -> Path | None:
    """Move the comment ``target`` holds to the history beside its document's, ``history/tree-<id>/`` of the
    tree its first line names (as :func:`suite.results.supersede` does the JSON); never overwrites."""
    if not target.is_file() or target.read_text() == new:
        return None
    tree = re.search(r", tree ([0-9a-f]{12})", target.read_text().partition("\n")[0])
    folder = target.parent / results.HISTORY / (f"tree-{tree[1]}" if tree else "tree-unknown")
    n = max((int(p.suffixes[-2][1:]) for p in folder.glob(f"{target.stem}.*{target.suffix}")
             if len(p.suffixes) > 1 and p.suffixes[-2][1:].isdigit()), default=0) + 1  # fmt: skip
    return results.move_new(target, folder / f"{target.stem}.{n}{target.suffix}")


if __name__ == "__main__":
    raise SystemExit(main())
