"""pytest hooks for every test path of this checkout (tests/, conformance/).

The skips are summed up by reason, one line each, just above the counts (``-rs`` still gives pytest's own lines, one
per test).
"""

from __future__ import annotations

import os
from collections import Counter


def _long_first(item) -> tuple[bool, bool]:
    """Who goes first: the tests that run other processes (``integration``, ``slow``), then hypothesis's (each runs
    its body on many examples)."""
    others = any(item.iter_markers("integration")) or any(item.iter_markers("slow"))
    return not others, not getattr(getattr(item, "obj", None), "is_hypothesis_test", False)


def pytest_collection_modifyitems(config, items) -> None:
    """In a pytest-xdist worker: the long tests first (:func:`_long_first`), each kind in its order.  xdist hands the
    tests out in this order (one list for every worker): the long ones spread over the workers first and the short
    ones fill in at the end, so that the workers end together."""
    if os.environ.get("PYTEST_XDIST_WORKER"):
        items.sort(key=_long_first)


def _reason(report) -> str:
    longrepr = report.longrepr
    reason = longrepr[2] if isinstance(longrepr, tuple) else str(longrepr)
    return reason.removeprefix("Skipped: ")


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    skipped = terminalreporter.stats.get("skipped", [])
    if not skipped or "s" in config.option.reportchars or "a" in config.option.reportchars.lower():
        return
    files: dict[str, Counter] = {}
    for report in skipped:
        files.setdefault(_reason(report), Counter())[report.nodeid.split("::")[0]] += 1
    terminalreporter.write_sep("=", "skipped, by reason (-rs: by test)")
    for reason, where in sorted(files.items(), key=lambda item: -item[1].total()):
        names = sorted(where)
        more = f" and {len(names) - 2} more files" if len(names) > 2 else ""
        terminalreporter.write_line(f"SKIPPED [{where.total()}] {reason} ({', '.join(names[:2])}{more})")
