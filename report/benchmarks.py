"""The benchmark's store as the report reads it: pytest-benchmark's saved JSON, one document per device.

``bench/test_bench_gather.py`` saves pytest-benchmark's own JSON to ``results/<device>/bench.json``
(:mod:`suite.results`, kind ``bench``): one record per (regime, layers, n, kernel), params of those names,
each record's ``extra_info`` carrying its case's paired alternating-rounds result (``paired``: medians per
kernel, every round, ratio upstream/candidate, A/A spread, verdict) and the run-wide facts under the
top-level ``decode_gather``. :class:`suite.models.BenchRun` turns that into the rows the views read: per case
the paired figures (which decide) and each kernel's pytest-benchmark statistics (``benchmark``, per layer).

Stdlib only: ``python -m report.compare`` runs in nox's own Python.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from suite import results
from suite.commands import MEASUREMENTS
from suite.models import BenchRun


def load(slug: str, base: Path | None = None, docs: Mapping[str, Any] | None = None) -> BenchRun | None:
    """The device's benchmark rows, from its pytest-benchmark run (from ``docs``, the device's documents
    already read, where given); None when it has none."""
    raw = docs.get("bench") if docs is not None else results.load("bench", slug, base)
    return BenchRun.read(raw, f"{slug}/{MEASUREMENTS['bench'].file}")
