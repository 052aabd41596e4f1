"""``python -m suite.migrate [DIR ...]``: the committed result documents in today's names and shapes, idempotently.

Keys older code named otherwise are renamed in place, the file's formatting kept (:data:`RENAMES`): the ratio's
``speedup*``, the e2e repeats' ``tokens_per_s_spread``, an older series' start-up probe's ``speed`` (its ratios),
``spread`` (its A/A spread) and ``bar`` (1 + max(A/A spread, its margin), now ``threshold``), the e2e A/B's
``variants`` (its kernels), and the rounds' order ``alternating``. An e2e document's runs get ``kernel`` for
``variant`` (a series_bench run's ``args`` keep the series' own ``--variant``), its points of before the
Comparison (``versus_upstream``, or tma's figures at the top level) their ratios as Comparisons; a ``series_bench``
document that recorded no ring choice gets the one its writer stores now (:func:`suite.models.docs.ring_choice`);
those are written as their writer writes them. A file in today's shape is left byte for byte. Run it again after
copying in results of older code. Default directories: ``results/`` and ``experiments/results/``.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from suite.commands import MEASUREMENTS
from suite.kernels import Kernel
from suite.models.docs import ring_choice
from suite.results import REPO_ROOT, dumps
from suite.stats import Comparison, median

#: (pattern, replacement) of every rename, keys only (a key is a JSON string followed by a colon)
RENAMES = ((re.compile(r'"speedup((?:_paired)?(?:_min|_max)?)"(\s*):'), r'"ratio\1"\2:'),
           (re.compile(r'"tokens_per_s_spread"(\s*):'), r'"tokens_per_s_range"\1:'),
           (re.compile(r'"(spread(?:_max)?)"(\s*):'), r'"aa_\1"\2:'), (re.compile(r'"speed"(\s*):'), r'"ratio"\1:'),
           (re.compile(r'"bar"(\s*):'), r'"threshold"\1:'), (re.compile(r'"variant(s|_env)"(\s*):'), r'"kernel\1"\2:'),
           (re.compile(r'"order"(\s*):(\s*)"alternating"'), r'"order"\1:\2"alternate"'))  # fmt: skip
KINDS = {m.schema: m.name for m in MEASUREMENTS.values()}


def upgrade(doc: dict) -> bool:
    """``doc`` in today's shape, in place (False: it was already): an e2e point's ratios as Comparisons of the rule
    ``repeats`` (each kernel's ratio, the median, min and max of its per-repeat ratios, its verdict, the larger of
    its and upstream's repeat ranges), an e2e run's kernel, a series_bench run's ring choice."""
    kind = KINDS.get(doc.get("schema"))
    runs = [r for r in doc.get("runs") or [] if "variant" in r] if kind == "e2e" else []
    for r in runs:
        r["kernel"] = r.pop("variant")
    points = [p for p in doc.get("points") or [] if not isinstance(p.get("ratio"), dict)] if kind == "e2e" else []
    for p in points:
        top = {k: p.pop(k, None) for k in ("ratio", "ratio_paired", "ratio_paired_min", "ratio_paired_max", "verdict")}
        noise = {a: v.get("tokens_per_s_range") for a, v in p["kernels"].items()}
        kernels = p.pop("versus_upstream", None) or {Kernel.TMA: top}
        p["ratio"] = {a: Comparison(v["ratio"], median(v["ratio_paired"]), v["ratio_paired_min"], v["ratio_paired_max"],
                                    repeat_range=max(noise[Kernel.UPSTREAM], noise[a]), rule="repeats") for a, v in kernels.items()}  # fmt: skip
    if choice := (ring_choice(doc) if kind == "series_bench" and "ring_choice" not in doc else None):
        doc["ring_choice"] = choice
    return bool(runs or points or choice)


def migrate_text(text: str) -> str:
    for pattern, new in RENAMES:
        text = pattern.sub(new, text)
    try:
        doc = json.loads(text)
    except ValueError:
        return text
    return dumps(doc) if isinstance(doc, dict) and upgrade(doc) else text  # the writer's formatting, the file's own


def migrate(dirs: list[Path]) -> list[Path]:
    """Rewrite every ``*.json`` under ``dirs`` not in today's names and shapes; the files changed."""
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
