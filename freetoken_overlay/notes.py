"""A reviewer's note below a patch's ``---``, carried round trip as a git note of its commit.

Text between a patch file's ``---`` line and its diffstat (or its first diff) is what ``git am`` ignores:
the place for a note to reviewers.  apply attaches it to the commit the patch makes (``git notes add``,
refs/notes/commits); export writes it back with ``git format-patch --notes``, which puts it below ``---``
under ``Notes:``, indented.  So a note, typed by hand or kept in git notes, stays in the patch file across
apply and export, and ``git commit --amend`` or ``git rebase`` in the work repository carry it along
(``notes.rewriteRef``, :func:`freetoken_overlay.workrepo.carry_notes`).
"""

from __future__ import annotations

import itertools
import re
import textwrap
from pathlib import Path

from .util import OVERLAY_EMAIL, OVERLAY_NAME, git

#: Where a patch's notes end: its diffstat (`` path | 3 +-``, `` 2 files changed, ...``) or its first diff.
_END = re.compile(r"^( \S.* \| +(\d+|Bin)| \d+ files? changed|diff --git )")
_IDENTITY = {"GIT_AUTHOR_NAME": OVERLAY_NAME, "GIT_AUTHOR_EMAIL": OVERLAY_EMAIL}


def patch_note(data: bytes) -> str:
    """The note below the ``---`` of a patch file's text ('' when there is none); export's own ``Notes:`` block
    is read back as the note it holds."""
    _, sep, rest = data.decode(errors="replace").partition("\n---\n")
    lines = itertools.takewhile(lambda line: not _END.match(line), rest.split("\n") if sep else ())
    note = "\n".join(lines).strip("\n")
    if note.startswith("Notes:\n"):
        note = textwrap.dedent(note.removeprefix("Notes:\n"))
    return note.strip()


def attach_note(repo: Path, commit: str, patch: Path) -> None:
    """Attach ``patch``'s note, if it has one, to ``commit`` (one it had already is replaced: the old text stays in
    the history of refs/notes/commits, ``git log -p refs/notes/commits``)."""
    note = patch_note(patch.read_bytes())
    had = git(repo, "notes", "show", commit, check=False).stdout.strip()
    if note and note != had:
        git(repo, "notes", "add", "-f", "-F", "-", commit, env=_IDENTITY, input=note + "\n")
