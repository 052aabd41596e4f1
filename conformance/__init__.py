"""Conformance suite for FreeToken's decode_gather kernel (CPU tier at the top level, GPU tier in gpu/)."""
