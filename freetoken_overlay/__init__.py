"""Tooling for the decode-gather patch series against FreeToken (PyPI ``freetoken``).

The series lives in ``patches/`` as ``git format-patch`` files against the
pinned upstream release (:mod:`freetoken_overlay.pin`).  This package rebuilds
that upstream base from the official wheels, applies and exports the series
(:mod:`freetoken_overlay.series`), builds an installable patched wheel
(:mod:`freetoken_overlay.wheel`) and the series' AOT kernel cache
(:mod:`freetoken_overlay.kernel_cache`).  ``python -m freetoken_overlay --help``
lists the commands; ``noxfile.py`` wraps them in sessions.
"""

from .pin import DEFAULT_VERSION, PINS, get_pin
from .series import BRANCH, series_hash
from .util import OverlayError, Workdir

__all__ = ["BRANCH", "DEFAULT_VERSION", "PINS", "OverlayError", "Workdir", "get_pin", "series_hash"]
