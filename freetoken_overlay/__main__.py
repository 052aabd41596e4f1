"""``python -m freetoken_overlay``: see :mod:`freetoken_overlay.cli`."""

from .cli import main

raise SystemExit(main())
