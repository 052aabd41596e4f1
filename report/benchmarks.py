"""The benchmark's store as the report reads it: pytest-benchmark's saved JSON, one document per device.

``bench/test_bench_gather.py`` saves pytest-benchmark's own JSON to ``results/<device>/pytest-benchmark.json``
(:mod:`suite.results`, kind ``benchmark``): one record per (regime, layers, n, kernel), params of those names,
each record's ``extra_info`` carrying its case's paired alternating-rounds result (``paired``: medians per
kernel, every round, ratio upstream/candidate, A/A spread, verdict) and the run-wide facts under the
top-level ``decode_gather``. :class:`suite.models.BenchRun` turns that into the rows the views read: per case
the paired figures (which decide) and each kernel's pytest-benchmark statistics (``benchmark``, per layer).

Before the pytest-benchmark store, the benchmark wrote ``bench.json`` (schema
``freetoken-decode-gather-bench/1``, kernels ``ours``/``unset``); :class:`~suite.models.BenchRun` reads such a
file into the same rows, only while a device has no pytest-benchmark run yet (:func:`load`).
Stdlib only: ``python -m report.compare`` runs in nox's own Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from suite import results
from suite.models import BenchRun


def load(slug: str, base: Path | None = None, docs: Mapping[str, Any] | None = None) -> BenchRun | None:
    """The device's benchmark rows: its pytest-benchmark run, else (until one exists) its legacy ``bench.json``
    (from ``docs``, the device's documents already read, where given)."""
    for kind in ("benchmark", "bench"):
        raw = docs[kind] if docs is not None and kind in docs else (None if docs is not None else results.load(kind, slug, base))
        doc = BenchRun.read(raw, f"{slug}/{results.KINDS[kind].file}")
        if doc is not None:
            return doc
    return None
