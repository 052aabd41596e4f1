"""A missing prerequisite (nvcc, a disassembler, freetoken, a CUDA device): skipped with the reason,
or, under ``CONFORMANCE_STRICT=1`` (a machine that is supposed to have it), failed with it."""

from __future__ import annotations

import pytest

from freetoken_overlay.util import env_flag

STRICT_ENV = "CONFORMANCE_STRICT"


def skip_or_fail(reason: str) -> None:
    """Skip with ``reason``; under ``CONFORMANCE_STRICT=1`` fail with it instead (``CONFORMANCE_STRICT`` read by the
    overlay's one boolean parser: a bad spelling is an error)."""
    if env_flag(STRICT_ENV):
        pytest.fail(f"{reason} ({STRICT_ENV} is set, so a missing prerequisite fails)", pytrace=False)
    pytest.skip(reason)
