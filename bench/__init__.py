"""Benchmarks and shared GPU test helpers for the decode-gather kernel (see bench/README.md)."""
