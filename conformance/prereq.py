"""A missing prerequisite (nvcc, a disassembler, freetoken, a CUDA device): skipped with the reason,
or, under ``CONFORMANCE_STRICT=1`` (a machine that is supposed to have it), failed with it."""

from __future__ import annotations

import os

import pytest

STRICT_ENV = "CONFORMANCE_STRICT"
_TRUE = {"1", "true", "yes", "on"}


def strict() -> bool:
    return os.environ.get(STRICT_ENV, "").strip().lower() in _TRUE


def skip_or_fail(reason: str) -> None:
    """Skip with ``reason``; under ``CONFORMANCE_STRICT=1`` fail with it instead."""
    if strict():
        pytest.fail(f"{reason} ({STRICT_ENV} is set, so a missing prerequisite fails)", pytrace=False)
    pytest.skip(reason)
