"""The one logging configuration of every script here (``python -m bench NAME``, the conformance and
experiments scripts): INFO and up, ``[logger] message`` on stderr. Stdlib only.

    from suite.log import configure
    configure()              # at the top of a script's main(), before its first message
"""

from __future__ import annotations

import logging

FORMAT = "[%(name)s] %(message)s"


def configure(level: int = logging.INFO) -> None:
    """Configure the root logger once (a second call, or a handler already set by the caller, leaves it)."""
    logging.basicConfig(level=level, format=FORMAT)
