"""GPU tier of the decode-gather conformance suite (see README.md here)."""
