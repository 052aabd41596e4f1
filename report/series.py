"""What the templates read from the series itself (``patches/``): commits and the footprint."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from freetoken_overlay.series import patch_files
from suite.kernels import SWITCH_ENV, Kernel


def series_commits(patches: Path | None = None) -> list[dict[str, Any]]:
    """Each patch's subject (without ``[PATCH n/m]``), the first paragraph of its message, the files it adds."""
    out = []
    for i, p in enumerate(patch_files(patches), 1):
        text = p.read_text()
        head, _, rest = text.partition("\n\n")
        subject = re.search(r"^Subject: (.*(?:\n .*)*)", head, re.M)
        message = rest.split("\n---\n", 1)[0]
        first = message.strip().split("\n\n", 1)[0]
        title = re.sub(r"^\[PATCH[^\]]*\]\s*", "", " ".join(subject.group(1).split())) if subject else p.name
        added = re.findall(r"^ create mode \d+ (\S+)$", text, re.M)
        out.append({"number": i, "subject": title, "summary": " ".join(first.split()), "added": added})
    return out


def commit_adding(commits: list[dict[str, Any]], suffix: str) -> dict[str, Any] | None:
    return next((c for c in commits if any(f.endswith(suffix) for f in c["added"])), None)


#: the subject words of the first patch of the second pull request (``auto``, stacked on the first)
SECOND_PR_STARTS = f"{SWITCH_ENV}={Kernel.AUTO}"


def pull_requests(commits: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The series as the stacked pull requests it is offered in: PR 1 the commits before the one adding
    ``FREETOKEN_DECODE_GATHER=auto`` (the kernel, its AOT entry, ``tma``, the benchmark), PR 2 that one and
    the rest; one PR when the series has no such commit."""
    cut = next((i for i, c in enumerate(commits) if SECOND_PR_STARTS in c["subject"]), len(commits))
    return [part for part in (commits[:cut], commits[cut:]) if part]


def _diffs(patch: Path) -> list[tuple[str, bool, int, int]]:
    """(path, created here, lines added, lines removed) of every file a patch changes."""
    diff = patch.read_text().split("\n-- \n", 1)[0]  # format-patch's signature ("-- ", git's version) is no line
    out = []
    for part in diff.split("\ndiff --git a/")[1:]:
        header, _, body = part.partition("\n@@")
        lines = body.splitlines()[1:]  # the rest of the first "@@" line is its range
        out.append((header.split(" ", 1)[0], "\nnew file mode " in header, sum(x.startswith("+") for x in lines),
                    sum(x.startswith("-") for x in lines)))  # fmt: skip
    return out


def series_footprint(patches: Path | None = None, numbers: Any = None) -> dict[str, Any]:
    """Lines added and removed per file over the series' patches ``numbers`` (1-based; default all), from
    their diffs: ``existing`` lists the upstream files they change (their hunks are what a rebase can
    conflict on), ``series`` the files an earlier patch of the series added that they change, ``new`` the
    files they add; each ``{"path", "added", "removed"}``, in path order."""
    every = list(patch_files(patches))
    created = {path for p in every for path, new, _, _ in _diffs(p) if new}
    chosen = [p for i, p in enumerate(every, 1) if numbers is None or i in numbers]
    files: dict[str, dict[str, Any]] = {}
    for p in chosen:
        for path, new, added, removed in _diffs(p):
            f = files.setdefault(path, {"path": path, "added": 0, "removed": 0, "new": new})
            f["added"] += added
            f["removed"] += removed
    for f in files.values():  # a file added here: a later patch's removed lines were the series' own
        if f["new"]:
            f["added"], f["removed"] = f["added"] - f["removed"], 0
    rows = sorted(files.values(), key=lambda f: f["path"])
    return {"existing": [f for f in rows if f["path"] not in created],
            "series": [f for f in rows if f["path"] in created and not f["new"]], "new": [f for f in rows if f["new"]],
            "added": sum(f["added"] for f in rows), "removed": sum(f["removed"] for f in rows)}  # fmt: skip
