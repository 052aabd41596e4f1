"""CPU checks of the GPU tier's own tooling (no GPU, not marked gpu): the compute-sanitizer log parser.
gpukit's own checks are in tests/test_gpukit.py."""

from __future__ import annotations


def test_sanitizer_log_parser():
    from conformance.gpu import run_sanitizer

    run_sanitizer.self_test()
    assert run_sanitizer.main(["--dry-run"]) == 0
