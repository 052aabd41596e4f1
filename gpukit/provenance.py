"""Which patched source a result was measured with, in ids a commit-message edit does not change.

The series hash (sha256 over ``patches/*.patch``) changes whenever a message is reworded, so a
result keyed by it is orphaned by a message-only change. Every new result file therefore also
records:

* ``tree``: ``git rev-parse decode-gather^{tree}`` in ``.work/upstream`` (the patched tree itself);
* ``patch_id``: ``git patch-id --stable`` of the whole diff ``upstream-<version>..decode-gather``
  (the same for any split or wording of the same change).

Older files keep what they have; ``results/<device>/history/README.md`` says which tree each old
series hash gives. Without ``.work/upstream`` (``nox -s apply`` not run) both are None.
"""

from __future__ import annotations

import functools
import subprocess
from pathlib import Path
from typing import Any

from freetoken_overlay import pin
from freetoken_overlay.series import BRANCH, series_hash, work_repo
from freetoken_overlay.util import Workdir


def _git(repo: Path, *args: str, stdin: str | None = None) -> str | None:
    try:
        out = subprocess.run(
            ["git", "-C", str(repo), *args], input=stdin, capture_output=True, text=True, timeout=60, check=False
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def patched_tree(repo: Path | None = None) -> str | None:
    """``git rev-parse decode-gather^{tree}`` in the work repository."""
    repo = repo or work_repo(Workdir.from_env())
    return _git(repo, "rev-parse", f"{BRANCH}^{{tree}}") if repo.is_dir() else None


def series_patch_id(repo: Path | None = None) -> str | None:
    """``git patch-id --stable`` of the diff from the pinned base tag to the series branch."""
    repo = repo or work_repo(Workdir.from_env())
    if not repo.is_dir():
        return None
    diff = _git(repo, "diff", "--full-index", f"{pin.get_pin().tag}..{BRANCH}")
    if not diff:
        return None
    out = _git(repo, "patch-id", "--stable", stdin=diff + "\n")
    return out.split()[0] if out else None


@functools.lru_cache(maxsize=1)
def provenance() -> dict[str, Any]:
    """``{"series_hash", "tree", "patch_id"}`` of the series in ``patches/`` and ``.work/upstream``."""
    try:
        series = series_hash()
    except Exception:  # a results reader on a checkout without patches/
        series = None
    return {"series_hash": series, "tree": patched_tree(), "patch_id": series_patch_id()}
