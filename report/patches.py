"""The series as the pages describe it: each patch's subject, summary and the files it adds (patches/)."""

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
