"""The one preamble of every ``python -m bench NAME``: logging, the parser (its prog and help line from the table,
``--out``, ``--dry-run`` where the measurement has one) and the thin entry to :func:`suite.results.save` (the
machine, the ``--out``, the log line), so each measurement's ``main`` holds only what it measures."""

from __future__ import annotations

import argparse
import logging
from pathlib import Path
from typing import Any

from suite import results
from suite.commands import MEASUREMENTS
from suite.log import configure


def parser(name: str, *, dry_run: str | None = None, **kwargs: Any) -> argparse.ArgumentParser:
    """Logging configured, and the parser of measurement ``name``: ``--out DIR`` (its file goes there instead
    of results/), ``--dry-run`` with the help ``dry_run`` where given; ``kwargs`` to ArgumentParser."""
    configure()
    m = MEASUREMENTS[name]
    where = f"results/<device>{f'x{m.gpus}' if m.gpus > 1 else ''}/{m.folder + '/' if m.folder else ''}"
    ap = argparse.ArgumentParser(prog=m.line, description=m.doc, **kwargs)
    ap.add_argument("--out", default=None, metavar="DIR",
                    help=f"write {Path(m.file).name} into DIR (default: {where}, suite.results)")  # fmt: skip
    if dry_run is not None:
        ap.add_argument("--dry-run", action="store_true", help=dry_run)
    return ap


def save(name: str, args: argparse.Namespace, doc: Any, machine: dict[str, Any] | None = None, **how: Any) -> Path:
    """Save ``doc`` (a model of :mod:`suite.models`, or its fields) as measurement ``name``'s document through
    :func:`suite.results.save` (``how``: its ``device``, ``keep_replaced``, ``markdown``), in ``--out`` or
    results/, with this machine's facts unless ``machine`` gives them."""
    if machine is None:
        from gpukit.machine import machine_info

        machine = machine_info()
    fields = doc.to_doc() if hasattr(doc, "to_doc") else dict(doc)
    path = results.save(name, machine=machine, out_dir=getattr(args, "out", None), **how, **fields)
    logging.getLogger(f"bench.{name}").info("wrote %s", path)
    return path
