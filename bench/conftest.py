"""pytest configuration of the benchmarks (bench/README.md): markers, and a skip with the reason for
every GPU benchmark where there is no CUDA device."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[1]
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))


try:  # the GPU benchmarks still run (manual rounds, results/<device>/bench.json) without the plugin
    import pytest_benchmark  # noqa: F401
except ImportError:

    @pytest.fixture
    def benchmark():
        class _NoPlugin:
            disabled = True
            extra_info: dict = {}

        return _NoPlugin()


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "gpu: needs a CUDA GPU (skipped with the reason elsewhere)")
    config.addinivalue_line("markers", "slow: takes seconds to minutes")


def cuda_skip_reason() -> str | None:
    try:
        import torch
    except ImportError as e:
        return f"torch is not importable ({e})"
    if not torch.cuda.is_available():
        return "no CUDA device (torch.cuda.is_available() is False)"
    if getattr(torch.version, "hip", None):
        return "ROCm build: the decode-gather TMA path is CUDA-only"
    return None


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    reason = None
    for item in items:
        if item.get_closest_marker("gpu") is None:
            continue
        if reason is None:
            reason = cuda_skip_reason() or ""
        if reason:
            item.add_marker(pytest.mark.skip(reason=f"GPU benchmark: {reason}"))
