"""``python -m suite.migrate [DIR ...]``: the committed result documents in today's names, idempotently.

Code of before :class:`suite.stats.Comparison` named the ratio ``speedup`` (``speedup_paired``, ``_min``,
``_max``), the end-to-end repeats' (max - min) / median ``tokens_per_s_spread`` and the rounds' order
``alternating``: those keys and that value are renamed in place, every figure and the file's formatting left
as measured. A ``series_bench`` document of a benchmark that recorded no ring choice gets the one its writer
stores now (:func:`suite.models.docs.ring_choice`, from its rows), the rest as it was. A file in today's shape
is left byte for byte. Run it again after copying in results of older code. Default directories: ``results/``
and ``experiments/results/``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from suite.commands import MEASUREMENTS
from suite.models.docs import ring_choice
from suite.results import REPO_ROOT, dumps

#: (pattern, replacement) of every rename, keys only (a key is a JSON string followed by a colon)
RENAMES = ((re.compile(r'"speedup((?:_paired)?(?:_min|_max)?)"(\s*):'), r'"ratio\1"\2:'),
           (re.compile(r'"tokens_per_s_spread"(\s*):'), r'"tokens_per_s_range"\1:'),
           (re.compile(r'"order"(\s*):(\s*)"alternating"'), r'"order"\1:\2"alternate"'))  # fmt: skip


def migrate_text(text: str) -> str:
    for pattern, new in RENAMES:
        text = pattern.sub(new, text)
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    if not isinstance(doc, dict) or doc.get("schema") != MEASUREMENTS["series_bench"].schema or "ring_choice" in doc:
        return text
    choice = ring_choice(doc)
    return dumps({**doc, "ring_choice": choice}) if choice else text  # the writer's formatting, the file's own


def migrate(dirs: list[Path]) -> list[Path]:
    """Rewrite every ``*.json`` under ``dirs`` that holds an old name or lacks its ring choice; the files changed."""
    changed = [p for p in sorted(p for d in dirs for p in d.rglob("*.json")) if migrate_text(p.read_text()) != p.read_text()]
    for path in changed:
        path.write_text(migrate_text(path.read_text()))
    return changed


def main(argv: list[str] | None = None) -> int:
    dirs = [Path(a) for a in (sys.argv[1:] if argv is None else argv)] or [REPO_ROOT / "results",
                                                                          REPO_ROOT / "experiments" / "results"]
    print(f"[migrate] {len(migrate(dirs))} document(s) migrated under {', '.join(map(str, dirs))}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
