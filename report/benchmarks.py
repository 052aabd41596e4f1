"""The benchmark's store as the report reads it: pytest-benchmark's saved JSON, one document per device.

``bench/test_bench_gather.py`` saves pytest-benchmark's own JSON to ``results/<device>/pytest-benchmark.json``
(:mod:`suite.results`, kind ``benchmark``): one record per (regime, layers, n, kernel), params of those names,
each record's ``extra_info`` carrying its case's paired alternating-rounds result (``paired``: medians per
kernel, every round, ratio upstream/candidate, A/A spread, verdict) and the run-wide facts under the
top-level ``decode_gather``. :func:`bench_doc` turns that into the rows the views read: per case the
paired figures (which decide) and each kernel's pytest-benchmark statistics (``benchmark``, per layer).

Before the pytest-benchmark store, the benchmark wrote ``bench.json`` (schema
``freetoken-decode-gather-bench/1``, kernels ``ours``/``unset``); :func:`legacy_doc` reads such a file
into the same rows, only while a device has no pytest-benchmark run yet (:func:`load`).
Stdlib only: ``python -m report.compare`` runs in nox's own Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from suite import results

BASE, AA, CANDIDATE = "upstream", "upstream_aa", "tma"
#: the file of the store before pytest-benchmark (results/<device>/history/ once a run replaces it)
LEGACY_FILE = results.KINDS["bench"].file
#: the legacy file's kernel names -> the switch's words
LEGACY_NAMES = {"ours": CANDIDATE, "unset": BASE, "unset_aa": AA}

Doc = Mapping[str, Any]


def records(pb: Doc) -> dict[tuple, dict[str, Doc]]:
    """``{(regime, layers, n): {kernel: record}}`` in the saved order; a record without the four params is
    refused (the store is this benchmark's, nothing else's)."""
    out: dict[tuple, dict[str, Doc]] = {}
    for b in pb.get("benchmarks") or []:
        params = b.get("params") or {}
        missing = [p for p in ("regime", "layers", "n", "kernel") if p not in params]
        if missing:
            raise ValueError(f"benchmark {b.get('fullname')!r}: params {sorted(params)} lack {missing} "
                             "(not a record of bench/test_bench_gather.py)")  # fmt: skip
        out.setdefault((params["regime"], params["layers"], params["n"]), {})[params["kernel"]] = b
    return out


def _per_kernel(kernels: Mapping[str, Doc], layers: int) -> dict[str, dict[str, Any]]:
    """Each kernel's pytest-benchmark statistics in µs per layer (median, IQR, min) and its rounds."""
    out = {}
    for k, b in kernels.items():
        s = b.get("stats") or {}
        out[k] = {f: s[f] / layers * 1e6 for f in ("median", "iqr", "min", "mean") if s.get(f) is not None}
        out[k]["rounds"] = s.get("rounds")
    return out


def _case_row(regime: str, layers: int, n: Any, kernels: Mapping[str, Doc], ceiling: float | None) -> dict[str, Any]:
    ex = next(iter(kernels.values())).get("extra_info") or {}
    p = ex.get("paired") or {}
    us = dict(p.get("median_us") or {})
    per_layer = (ex.get("bytes") or 0) // max(1, layers)
    gbps = {k: (per_layer / (v * 1e-6) / 1e9 if v and per_layer else None) for k, v in us.items()}
    return {
        "regime": regime, "layers": layers, "n": n, "bytes_per_layer": per_layer,
        "us": us, "rounds_us": p.get("rounds_us") or {}, "rounds": p.get("rounds"),
        "speedup": (p.get("ratio") or {}).get(CANDIDATE), "speedup_paired": (p.get("ratio_paired") or {}).get(CANDIDATE),
        "ratio": p.get("ratio") or {}, "verdicts": p.get("verdict") or {},
        "aa_ratio": p.get("aa_ratio"), "aa_spread": p.get("aa_spread"),
        "verdict": (p.get("verdict") or {}).get(CANDIDATE),
        "gbps": gbps, "ceiling_gbps": ceiling,
        "pct_of_ceiling": {k: (100.0 * v / ceiling if v and ceiling else None) for k, v in gbps.items()},
        "verified_sets": sum((b.get("extra_info") or {}).get("verified_sets") or 0 for b in kernels.values()),
        "benchmark": _per_kernel(kernels, layers),
        "series": ex.get("series"), "tree": ex.get("tree"),
        **{k: p[k] for k in ("footprint", "reps") if k in p},
    }  # fmt: skip


def _step(kernels: Mapping[str, Doc], layers: int) -> dict[str, Any]:
    ex = next(iter(kernels.values())).get("extra_info") or {}
    p = ex.get("paired") or {}
    keep = ("steps_per_round", "miss_rate", "misses_per_step", "zipf_exponent", "modelled_miss_rate", "cache_slots",
            "top_k", "batch", "ideal_copy_us_per_step", "auto_choice")  # fmt: skip
    return {
        "layers": layers, "bytes_per_step": ex.get("bytes"), "rounds": p.get("rounds"),
        "us_per_step": p.get("median_us") or {}, "rounds_us": p.get("rounds_us") or {},
        "speedup": (p.get("ratio") or {}).get(CANDIDATE), "speedup_paired": (p.get("ratio_paired") or {}).get(CANDIDATE),
        "ratio_by_kernel": p.get("ratio") or {}, "verdict_by_kernel": p.get("verdict") or {},
        "aa_ratio": p.get("aa_ratio"), "aa_spread": p.get("aa_spread"),
        "verdict": (p.get("verdict") or {}).get(CANDIDATE),
        "benchmark": _per_kernel(kernels, 1),  # per step
        **{k: p[k] for k in keep if k in p},
    }  # fmt: skip


def bench_doc(pb: Doc, file: str = results.KINDS["benchmark"].file) -> dict[str, Any]:
    """The rows the views read, from a pytest-benchmark JSON of ``bench/test_bench_gather.py``."""
    info = pb.get("decode_gather") or {}
    ceiling = ((info.get("ceiling") or {}).get("start") or {}).get("gbps")
    gather, step = [], None
    for (regime, layers, n), kernels in records(pb).items():
        if regime == "step":
            step = _step(kernels, layers)
        else:
            gather.append(_case_row(regime, layers, n, kernels, ceiling))
    machine = {**((pb.get("machine_info") or {}).get("gpu") or {})}
    kernel = info.get("kernel") or {}
    return {
        "store": file, "synthetic": bool(pb.get("synthetic")), "generated_at": pb.get("datetime"),
        "machine": machine, "provenance": pb.get("provenance") or {},
        "kernel": {"tma_default_ring": kernel.get("tma_default_ring"), "upstream": kernel.get("upstream") or {}},
        "geometry": info.get("geometry") or {}, "ceiling": info.get("ceiling") or {},
        "method": info.get("method") or {}, "verified": info.get("verified") or {},
        "gather": gather, "decode_step": step, "pytest_benchmark": pb.get("version"),
    }  # fmt: skip


def renamed(d: Any) -> Any:
    """``d``'s keys in the switch's words (a document written before them names kernels ours/unset/unset_aa)."""
    return {LEGACY_NAMES.get(k, k): v for k, v in d.items()} if isinstance(d, dict) else d


def legacy_doc(doc: Doc, file: str = LEGACY_FILE) -> dict[str, Any]:
    """A ``freetoken-decode-gather-bench/1`` document in the same rows, its kernels renamed to the switch's words."""
    keys = ("us", "rounds_us", "gbps", "pct_of_ceiling", "us_per_step")
    gather = [{**r, **{k: renamed(r[k]) for k in keys if k in r}} for r in doc.get("gather") or []]
    step = doc.get("decode_step")
    if step:
        step = {**step, **{k: renamed(step[k]) for k in keys if k in step}}
    kernel = doc.get("kernel") or {}
    return {**doc, "store": file, "gather": gather, "decode_step": step,
            "kernel": {"tma_default_ring": kernel.get("decode_gather_default_ring"), "upstream": kernel.get("upstream") or {}}}  # fmt: skip


def normalize(doc: Doc | None, file: str) -> dict[str, Any] | None:
    """The rows of a pytest-benchmark run of the benchmark or of a legacy ``bench.json``; None for any other document."""
    if not isinstance(doc, Mapping):
        return None
    if doc.get("schema") == results.KINDS["benchmark"].schema:
        return bench_doc(doc, file)
    if doc.get("schema") == results.KINDS["bench"].schema:
        return legacy_doc(doc, file)
    return None


def load(slug: str, base: Path | None = None, docs: Mapping[str, Doc] | None = None) -> dict[str, Any] | None:
    """The device's benchmark rows: its pytest-benchmark run, else (until one exists) its legacy ``bench.json``
    (from ``docs``, the device's documents already read, where given)."""
    for kind in ("benchmark", "bench"):
        raw = docs.get(kind) if docs is not None else results.load(kind, slug, base)
        doc = normalize(raw, f"{slug}/{results.KINDS[kind].file}")
        if doc is not None:
            return doc
    return None
