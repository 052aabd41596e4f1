"""The report's model: :func:`context` assembles, per device, the views of :mod:`report.gather` (the benchmark),
:mod:`report.views` (the other documents) and :mod:`report.repeats` (earlier runs of the same tree), and the
series (:mod:`report.series`): what the templates lay out (nothing here writes Markdown)."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any, Mapping

from freetoken_overlay.kernel_cache import SPEC_PREFIX
from freetoken_overlay.series import patch_files, series_hash
from suite.results import machine_line, series_of_version
from report.gather import decode_step_view, gather_view, targets_view
from report.repeats import current_ratios, repeats_view
from report.series import pull_requests, series_commits, series_footprint
from report.views import (auto_view, contention_view, e2e_view, gpu_view, profile_view, sanitize_view, sass_view,
                          series_bench_view, step_pdl_view, sweep_view)  # fmt: skip
from suite import results
from suite.commands import MEASUREMENTS
from suite.models import MODELS, BenchRun, Document, Model


def series_of(x: Any) -> str | None:
    """The series hash of a document (a model or a mapping: its provenance's, else its machine's), or ``x`` itself
    where it is a hash (or None)."""
    if x is None or isinstance(x, str):
        return x
    get = x.get if isinstance(x, Mapping) else lambda k: getattr(x, k, None)
    return (get("provenance") or {}).get("series_hash") or (get("machine") or {}).get("series_hash")


#: Where the kernel caches of the pull requests' stacks are recorded: ``<series>.json``, the ``MANIFEST.json`` that
#: ``nox -s build`` writes for a build of the series through that PR (``python -m freetoken_overlay apply --patches
#: DIR`` of its patches alone, then ``build``, with $FT_OVERLAY_WORKDIR elsewhere).
KERNEL_CACHE = "kernel-cache"


def kernel_caches(base: Path) -> dict[str, dict[str, Any]]:
    """{series: its decode_gather entry's bytes and rings (upstream's kernel cache has none), archs, nvcc} of the
    kernel caches recorded under ``base``/:data:`KERNEL_CACHE`."""
    out = {}
    for m in (json.loads(p.read_text()) for p in sorted((base / KERNEL_CACHE).glob("*.json"))):
        ours = {k: v for k, v in m["kernels"].items() if k.startswith(SPEC_PREFIX)}
        series = series_of_version(m["freetoken"])
        out[series] = {"series": series,
                       "bytes": sum(ours.values()), "nvcc": re.sub(r".*release ([^,]+).*", r"\1", m["nvcc"]),
                       "rings": ["x".join(r) for k in ours for r in re.findall(r"_(\d+)_(\d+)_(\d+)", k)],
                       "archs": "/".join("sm_" + a.replace(".", "") for a in m["cuda_arch_list"].split())}  # fmt: skip
    return out


def machine_of(docs: Mapping[str, Model]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The machine of the first document with one, and its provenance (older files carry the series in the machine)."""
    for doc in (d for d in docs.values() if d.machine):
        return doc.machine, doc.provenance or {}
    return {}, {}


def models_of(raw: Mapping[str, Mapping[str, Any]]) -> dict[str, Document]:
    """The device's documents (:func:`suite.results.load_device`) as their models (the kinds that have one)."""
    return {kind: MODELS[kind].from_doc(doc) for kind, doc in raw.items() if kind in MODELS and kind != "bench"}


def device_view(slug: str, base: Path) -> dict[str, Any]:
    """One device's views, from its documents under ``base``."""
    raw = results.load_device(slug, base)
    bench = BenchRun.load(slug, docs=raw)  # the store's rows, from the documents read once
    docs: dict[str, Model] = {**({"bench": bench} if bench else {}), **models_of(raw)}
    machine, prov = machine_of(docs)
    name = machine.get("device_name") or slug
    gpus = MEASUREMENTS["contention"].gpus
    gather = gather_view(bench)
    png = (base / slug / MEASUREMENTS["sweep"].file).with_suffix(".png")
    ceiling = sweep_view(docs.get("sweep"), png.relative_to(base).as_posix() if png.is_file() else None,
                         gather["ring"] if gather else None)  # fmt: skip
    bench_prov = bench.provenance if bench else {}
    ubench = series_bench_view(docs.get("series_bench"))
    current = current_ratios(gather, ubench)
    repeats = repeats_view(base, slug, docs, current)
    return {
        "slug": slug, "name": f"{gpus} x {name}" if slug.endswith(f"x{gpus}") else name,
        "machine": machine_line({**machine, **{k: v for k, v in prov.items() if v}}),
        "link": machine.get("pcie_gen_under_load") or machine.get("pcie_gen_current"),
        "series": bench_prov.get("series_hash") or machine.get("series_hash"),
        "readme": (base / slug / "README.md").is_file(), "history": (base / slug / results.HISTORY).is_dir(),
        "gather": gather, "step": decode_step_view(bench), "ceiling": ceiling, "series_bench": ubench,
        "step_pdl": step_pdl_view(docs.get("step_pdl")), "contention": contention_view(docs.get("contention")),
        "conformance": gpu_view(docs.get("gpu")), "sanitizer": sanitize_view(docs.get("sanitize")),
        "targets": targets_view(gather, ceiling), "e2e": e2e_view(docs.get("e2e")),
        "auto": auto_view(docs.get("auto_stability")), "repeats": repeats,
        "profile": profile_view(results.read_json(base / slug / "benchbw.json")),  # ft bench bw's, with its command
    }  # fmt: skip


def newest_first(devices: list[dict[str, Any]], view: str) -> list[dict[str, Any]]:
    """The devices that have ``view``, its document measured last first (an undated one last)."""
    return sorted((d for d in devices if d[view]), key=lambda d: d[view]["doc"].generated_at or "", reverse=True)


def context(base: Path, patches: Path | None = None) -> dict[str, Any]:
    """Everything the templates read, from the documents under ``base`` (a ``results/`` directory) and the
    series in ``patches`` (default: the checkout's patches/). Each of ``prs`` has its ``page``: its stack's series
    hash (it and the PRs before it), which its figures' labels compare with, and its stack's kernel cache."""
    devices = [device_view(slug, base) for slug in results.devices(base)]
    files, commits, caches = patch_files(patches), series_commits(patches), kernel_caches(base)
    prs = [{"number": i, "commits": part, "footprint": series_footprint(patches, {c["number"] for c in part}),
            "page": {"series_hash": (h := series_hash(files=files[: part[-1]["number"]])),
                     "kernel_cache": caches.get(h)}}
           for i, part in enumerate(pull_requests(commits, patches), 1)]  # fmt: skip
    return {"devices": devices, "measured": [d for d in devices if d["gather"]], "series_hash": series_hash(patches),
            "benched": newest_first(devices, "series_bench"), "e2e_device": next(iter(newest_first(devices, "e2e")), None),
            "sass": sass_view(results.load("sass", base=base)), "prs": prs,
            "sass_test": next((c for c in commits if "tests/kernels/test_bulk_copy_sass.py" in c["added"]), None)}
