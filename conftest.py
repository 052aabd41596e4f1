"""pytest hooks for every test path of this checkout (tests/, conformance/, the series' upstream tests).

The skips are summed up by reason, one line each, just above the counts: ``-rs`` printed one line per test
location (37 on a CPU machine, most of them "needs a CUDA GPU").  ``-rs`` still gives pytest's own lines.
"""

from __future__ import annotations

from collections import Counter


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
