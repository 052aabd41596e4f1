"""What the templates read from the series itself (``patches/``): commits and the footprint."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from freetoken_overlay.series import patch_files


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


def series_footprint(patches: Path | None = None) -> dict[str, Any]:
    """Lines added and removed per file over the whole series, from the patches' diffs: ``existing``
    lists the upstream files the series changes (their hunks are what a rebase can conflict on),
    ``new`` the files it adds; each ``{"path", "added", "removed"}``, in path order."""
    files: dict[str, dict[str, Any]] = {}
    for p in patch_files(patches):
        diff = p.read_text().split("\n-- \n", 1)[0]  # format-patch's signature ("-- ", git's version) is no line
        for part in diff.split("\ndiff --git a/")[1:]:
            header, _, body = part.partition("\n@@")
            f = files.setdefault(header.split(" ", 1)[0], {"path": header.split(" ", 1)[0], "added": 0, "removed": 0})
            f.setdefault("new", "\nnew file mode " in header)
            for line in body.splitlines()[1:]:  # the rest of the first "@@" line is its range
                f["added"] += line.startswith("+")
                f["removed"] += line.startswith("-")
    for f in files.values():  # a file the series adds: a later patch's removed lines were the series' own
        if f["new"]:
            f["added"], f["removed"] = f["added"] - f["removed"], 0
    rows = sorted(files.values(), key=lambda f: f["path"])
    return {
        "existing": [f for f in rows if not f["new"]],
        "new": [f for f in rows if f["new"]],
        "added": sum(f["added"] for f in rows),
        "removed": sum(f["removed"] for f in rows),
    }
