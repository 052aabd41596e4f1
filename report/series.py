"""What the templates read from the series itself (``patches/``): commits and the footprint."""

from __future__ import annotations

import re
from email.header import decode_header, make_header
from pathlib import Path
from typing import Any

from freetoken_overlay.series import PATCHES_DIR, patch_files
from freetoken_overlay.util import OverlayError


def series_commits(patches: Path | None = None) -> list[dict[str, Any]]:
    """Each patch's subject (without ``[PATCH n/m]``), the first paragraph of its message, the files it adds."""
    out = []
    for i, p in enumerate(patch_files(patches), 1):
        text = p.read_text()
        head, _, rest = text.partition("\n\n")
        subject = re.search(r"^Subject: (.*(?:\n .*)*)", head, re.M)
        message = rest.split("\n---\n", 1)[0]
        first = message.strip().split("\n\n", 1)[0]
        title = " ".join(str(make_header(decode_header(subject.group(1)))).split()) if subject else p.name
        title = re.sub(r"^\[PATCH[^\]]*\]\s*", "", title)
        added = re.findall(r"^ create mode \d+ (\S+)$", text, re.M)
        out.append({"number": i, "subject": title, "summary": " ".join(first.split()), "added": added})
    return out


#: The file in patches/ that names the first patch of each stacked pull request (its comment lines say how).
PULL_REQUESTS = "pull-requests.txt"


def pull_requests(commits: list[dict[str, Any]], patches: Path | None = None) -> list[list[dict[str, Any]]]:
    """The series (``commits`` of ``patches``, default patches/) as its stacked pull requests: each begins at the
    patch whose subject a line of :data:`PULL_REQUESTS` names (one PR where that file is missing). OverlayError,
    naming the file, the line and the subjects there are, for a line that names no patch, or lines out of order."""
    path = (patches or PATCHES_DIR) / PULL_REQUESTS
    subjects, starts = [c["subject"] for c in commits], []
    for n, line in enumerate(path.read_text().splitlines() if path.is_file() else [], 1):
        if (want := line.strip()) and not want.startswith("#"):
            if (found := subjects.count(want)) != 1:
                what = f"the subject of {found} patches" if found else "no patch's subject"
                raise OverlayError(f"{path}, line {n}: {want!r} is {what} in {path.parent}; each line names one "
                                   "patch's subject, one of:" + "".join(f"\n  {s}" for s in subjects))
            starts.append(subjects.index(want))
    if starts and (starts[0] != 0 or starts != sorted(set(starts))):
        raise OverlayError(f"{path}: its lines name the pull requests' first patches in series order, the first line "
                           f"the series' first patch ({subjects[0]!r})")  # fmt: skip
    cuts = (starts or [0]) + [len(commits)]
    return [commits[a:b] for a, b in zip(cuts, cuts[1:]) if a < b]


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
