"""The one logging configuration of every script here (``configure()`` at the top of its ``main``): INFO and up,
``[logger] message`` on stderr. Stdlib only."""

from __future__ import annotations

import logging

FORMAT = "[%(name)s] %(message)s"


def configure(level: int = logging.INFO) -> None:
    """Configure the root logger once (a second call, or a handler already set by the caller, leaves it)."""
    logging.basicConfig(level=level, format=FORMAT)
