"""pytest configuration of the benchmarks (bench/README.md): a skip with the reason for every GPU benchmark
where there is no CUDA device. Markers are registered in pyproject.toml."""

from __future__ import annotations

import pytest

from gpukit.skips import cuda_skip_reason

def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if item.get_closest_marker("gpu") is None:
            continue
        if reason is None:
            reason = cuda_skip_reason() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"GPU benchmark: {reason}"))
