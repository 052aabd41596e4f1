"""Old names of :mod:`gpukit.results`, for the modules still being rewritten (``bench/test_bench_gather.py``,
``bench/upstream_bench.py``, ``bench/probes/``); new code imports :mod:`gpukit.results`. Delete with their port."""

from __future__ import annotations

import os
from pathlib import Path

from gpukit.results import KINDS, REPO_ROOT, document, now_iso, scrub  # noqa: F401
from gpukit.results import read_json as load  # noqa: F401
from gpukit.results import write_json as write  # noqa: F401

RESULTS = REPO_ROOT / "results"


def resolve_dir(template: str | os.PathLike, slug: str) -> Path:
    """A directory from a template that may hold ``{device}`` (absolute against the checkout)."""
    p = Path(str(template).replace("{device}", slug))
    return p if p.is_absolute() else REPO_ROOT / p
