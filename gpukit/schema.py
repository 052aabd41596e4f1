"""The result documents: one schema id per kind, one writer, one reader, and the scrubbing of machine paths.

Kinds (``results/<device>/...``; the report reads them only through :func:`load`):

=============== ============================================= ===============================
kind            file                                          written by
=============== ============================================= ===============================
bench           ``bench.json``                                ``bench/test_bench_gather.py``
ceiling         ``ceiling.json``                              ``python -m bench.sweep``
conformance     ``conformance/summary.json``                  ``conformance/gpu`` (conftest)
sanitizer       ``conformance/sanitizer.json``                ``python -m conformance.gpu.run_sanitizer``
sass            ``results/sass.json`` (not per device)        ``python -m conformance.sass``
step_pdl        ``step_pdl.json``                             ``python -m bench.step_pdl``
contention      ``contention.json`` (``results/<device>x2/``)  ``python -m bench.contention``
upstream_bench  ``upstream_bench.json``                       ``python -m bench.upstream_bench``
=============== ============================================= ===============================

A new kind is one line in :data:`KINDS`; :func:`document` stamps every new file with its schema
id, the time, the machine (when asked) and the provenance (series hash, patched tree, patch-id).
Old files keep their fields; readers treat every field as optional.
"""

from __future__ import annotations

import dataclasses
import datetime as _dt
import json
import os
import re
from pathlib import Path
from typing import Any, NamedTuple

REPO_ROOT = Path(__file__).resolve().parents[1]
RESULTS = REPO_ROOT / "results"


class Kind(NamedTuple):
    schema: str
    path: str  # relative to results/<device>/ (or to results/ when device-independent)
    per_device: bool = True


KINDS: dict[str, Kind] = {
    "bench": Kind("freetoken-decode-gather-bench/1", "bench.json"),
    "ceiling": Kind("freetoken-decode-gather-ceiling/1", "ceiling.json"),
    "conformance": Kind("freetoken-decode-gather-conformance/1", "conformance/summary.json"),
    "sanitizer": Kind("freetoken-decode-gather-sanitizer/1", "conformance/sanitizer.json"),
    "sass": Kind("freetoken-decode-gather-sass/1", "sass.json", per_device=False),
    "step_pdl": Kind("freetoken-decode-gather-step-pdl/1", "step_pdl.json"),
    "contention": Kind("freetoken-decode-gather-contention/1", "contention.json"),
    "upstream_bench": Kind("freetoken-decode-gather-upstream-bench/1", "upstream_bench.json"),
}


def now_iso() -> str:
    return _dt.datetime.now(_dt.timezone.utc).replace(microsecond=0).isoformat()


def resolve_dir(template: str | os.PathLike, slug: str) -> Path:
    """A directory from a template that may hold ``{device}`` (made absolute against the repo root)."""
    p = Path(str(template).replace("{device}", slug))
    return p if p.is_absolute() else REPO_ROOT / p


def path_of(kind: str, results: Path = RESULTS, slug: str | None = None) -> Path:
    k = KINDS[kind]
    return results / slug / k.path if k.per_device else results / k.path


def document(kind: str, *, machine: dict[str, Any] | None = None, **fields: Any) -> dict[str, Any]:
    """A new result document of ``kind``: schema id, time, provenance, machine, then ``fields``."""
    from gpukit.provenance import provenance

    doc: dict[str, Any] = {"schema": KINDS[kind].schema, "generated_at": now_iso(), "provenance": provenance()}
    if machine is not None:
        doc["machine"] = machine
    doc.update(fields)
    return scrub(doc)


_SITE = re.compile(r"/[^\s\"':]*?/(site-packages|dist-packages)/")
_TMP = re.compile(r"/tmp/[^\s\"'/]+")


def scrub(obj: Any, replacements: dict[str, str] | None = None) -> Any:
    """``obj`` with machine paths replaced: the repository root by ``.``, ``.../site-packages/`` by
    ``<site-packages>/``, a ``/tmp/<dir>`` by ``<tmp>``, and any ``replacements`` (prefix -> label)."""
    if isinstance(obj, dict):
        return {k: scrub(v, replacements) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub(v, replacements) for v in obj]
    if not isinstance(obj, str):
        return obj
    s = obj
    for prefix, label in (replacements or {}).items():
        s = s.replace(prefix, label)
    s = s.replace(str(REPO_ROOT) + "/", "").replace(str(REPO_ROOT), ".")
    s = _SITE.sub(r"<\1>/", s)
    return _TMP.sub("<tmp>", s)


def write(path: Path, doc: Any) -> Path:
    """Write ``doc`` as indented JSON, atomically (a temp file renamed over the target)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, sort_keys=False, default=_json_default) + "\n")
    tmp.replace(path)
    return path


def _json_default(o: Any) -> Any:
    if isinstance(o, Path):
        return str(o)
    if dataclasses.is_dataclass(o):
        return dataclasses.asdict(o)
    if isinstance(o, tuple):
        return list(o)
    return str(o)


def load(path: Path) -> dict[str, Any] | None:
    """A result document, or None when the file is missing or not JSON."""
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return None


def load_device(results: Path, slug: str) -> dict[str, Any]:
    """Every per-device document of ``results/<slug>/`` by kind (missing kinds left out)."""
    out = {}
    for kind, k in KINDS.items():
        if k.per_device:
            doc = load(results / slug / k.path)
            if doc is not None:
                out[kind] = doc
    return out


def devices(results: Path = RESULTS) -> list[str]:
    """The device directories of ``results/`` that hold at least one document."""
    return sorted(
        d.name for d in results.iterdir() if d.is_dir() and any((d / k.path).is_file() for k in KINDS.values())
    ) if results.is_dir() else []
