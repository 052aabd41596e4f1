"""``python -m bench NAME [ARGS...]``: the measurement NAME of ``suite.commands.MEASUREMENTS`` that is a
module of bench/ (``bench/<NAME>.py``, ``bench/e2e``), run with ARGS; ``python -m bench`` lists them."""

from __future__ import annotations

import importlib
import logging
import sys

from suite.commands import MEASUREMENTS
from suite.log import configure


def modules() -> dict[str, str]:
    """{name: module} of the measurements ``python -m bench NAME`` runs."""
    return {m.name: m.entry or f"bench.{m.name}" for m in MEASUREMENTS.values() if m.args[:2] == ("bench", m.name)}


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    known = modules()
    if not argv or argv[0] in ("-h", "--help") or argv[0] not in known:
        if argv and argv[0] not in ("-h", "--help"):
            configure()
            logging.getLogger("bench").error("python -m bench: no measurement %r; one of %s", argv[0], ", ".join(known))
        print("usage: python -m bench NAME [ARGS...]\n" + "\n".join(f"  {n:<16}{MEASUREMENTS[n].doc}" for n in known))
        return 0 if argv[:1] in ([], ["-h"], ["--help"]) else 2
    name, rest = argv[0], argv[1:]
    sys.argv = [f"python -m bench {name}", *rest]  # what a module that reads sys.argv sees (and records)
    return importlib.import_module(known[name]).main(rest)


if __name__ == "__main__":
    sys.exit(main())
