"""CPU tests of freetoken_overlay's apply and export as a whole: the fixed points, an upstream clone, the submission
branch (the pin: test_pin.py; the wheel: test_wheel.py; the kernel cache: test_kernel_cache.py; the work
repository's rule: test_workrepo.py; settings, the CLI and the nox sessions: test_settings_and_nox.py).

Most tests drive ``python -m freetoken_overlay`` in a subprocess with a
temporary work directory (FT_OVERLAY_WORKDIR) whose wheel cache points at the
shared, verified one, so nothing is downloaded twice.
"""

from __future__ import annotations

import hashlib
import re
import shutil
import time
from pathlib import Path

import pytest

from freetoken_overlay import series, upstream
from freetoken_overlay.export import FORMAT_PATCH_FLAGS, clean_in_git
from freetoken_overlay.series import BRANCH, series_hash
from freetoken_overlay.util import Workdir

from helpers import PIN, commit_project, git, overlay, read_dir  # noqa: E402


# --------------------------------------------------------------------------- apply / export


@pytest.mark.integration
def test_empty_series_applies_base_only(tmp_path: Path, workdir: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    overlay("apply", "--patches", str(empty), workdir=workdir)
    repo = workdir / "upstream"
    assert git(repo, "rev-parse", BRANCH, PIN.tag) == f"{PIN.base_commit}\n{PIN.base_commit}"
    overlay("export", "--patches", str(empty), workdir=workdir)
    assert read_dir(empty) == {}


@pytest.mark.integration
def test_throwaway_series_apply_export_fixed_point(throwaway_series: Path, tmp_path: Path, wheel_cache: Path) -> None:
    before = read_dir(throwaway_series)
    assert all(b"From 0000000000000000000000000000000000000000 " in p for p in before.values())
    # [PATCH] without n/m: adding a commit leaves the other files' bytes alone
    assert [p.split(b"\nSubject: ")[1].split(b"]")[0] for p in before.values()] == [b"[PATCH", b"[PATCH"]
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "wheels").symlink_to(wheel_cache, target_is_directory=True)
    overlay("apply", "--patches", str(throwaway_series), workdir=fresh)
    head = git(fresh / "upstream", "rev-parse", BRANCH)
    overlay("export", "--patches", str(throwaway_series), workdir=fresh)
    assert read_dir(throwaway_series) == before
    # Re-applying is idempotent: same commit ids, work tree left as it was.
    again = overlay("apply", "--patches", str(throwaway_series), workdir=fresh)
    assert "up to date" in again.stdout
    assert git(fresh / "upstream", "rev-parse", BRANCH) == head
    assert (fresh / "upstream/tests/test_throwaway.py").is_file()


def _unnumbered(patch: bytes) -> bytes:
    """A patch file with its header lines unfolded and ``[PATCH n/m]`` written ``[PATCH]``."""
    head, sep, rest = patch.partition(b"\n\n")
    return re.sub(rb"^Subject: \[PATCH \d+/\d+\]", b"Subject: [PATCH]", head.replace(b"\n ", b" "), flags=re.M) + sep + rest


@pytest.mark.integration
def test_real_series_apply_export_fixed_point(tmp_path: Path, workdir: Path) -> None:
    patches = tmp_path / "project" / "patches"
    shutil.copytree(series.PATCHES_DIR, patches)
    git(patches.parent, "init", "-q")
    commit_project(patches)
    overlay("apply", "--patches", str(patches), workdir=workdir)
    overlay("export", "--patches", str(patches), workdir=workdir)
    # the same commits, subjects without n/m (patches/ may still carry them from an older export)
    exported = read_dir(patches)
    assert {n: _unnumbered(d) for n, d in exported.items()} == {
        n: _unnumbered(d) for n, d in read_dir(series.PATCHES_DIR).items()}  # fmt: skip
    fresh = tmp_path / "fresh"
    fresh.mkdir()
    (fresh / "wheels").symlink_to(workdir / "wheels", target_is_directory=True)
    overlay("apply", "--patches", str(patches), workdir=fresh)
    overlay("export", "--patches", str(patches), workdir=fresh)
    assert read_dir(patches) == exported  # a byte-for-byte fixed point from then on


@pytest.mark.integration
def test_apply_onto_an_upstream_clone(throwaway_series: Path, tmp_path: Path, workdir: Path) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(workdir / "upstream", clone)
    git(clone, "checkout", "-q", "-b", "main", PIN.tag)
    git(clone, "branch", "-D", BRANCH)  # the copy came with one; make it anew off main
    args = ("apply", "--patches", str(throwaway_series), "--upstream", str(clone), "--rev", "main")
    overlay(*args, workdir=workdir)
    assert git(clone, "rev-parse", BRANCH) == git(workdir / "upstream", "rev-parse", BRANCH)
    assert git(clone, "rev-parse", "--abbrev-ref", "HEAD") == "main"  # its checkout untouched
    assert "up to date" in overlay(*args, workdir=workdir).stdout


@pytest.mark.integration
def test_forcing_a_clone_branch_keeps_its_old_tip(throwaway_series: Path, tmp_path: Path, workdir: Path) -> None:
    """--upstream --force moves an existing branch of the user's clone; its old tip stays named."""
    clone = tmp_path / "clone"
    shutil.copytree(workdir / "upstream", clone)
    git(clone, "checkout", "-q", "-b", "main", PIN.tag)
    git(clone, "branch", "-f", "mine", PIN.tag)
    (clone / "mine.txt").write_text("my work\n")
    git(clone, "checkout", "-q", "mine")
    git(clone, "add", "mine.txt")
    git(clone, "commit", "-q", "-m", "my work")
    mine = git(clone, "rev-parse", "mine")
    git(clone, "checkout", "-q", "main")
    args = ("apply", "--patches", str(throwaway_series), "--upstream", str(clone), "--rev", "main", "--branch", "mine")
    refused = overlay(*args, workdir=workdir, check=False)
    assert refused.returncode != 0 and git(clone, "rev-parse", "mine") == mine
    proc = overlay(*args, "--force", workdir=workdir)
    assert git(clone, "rev-parse", "mine") != mine
    kept = proc.stdout.split("its old tip stays as ", 1)[1].split()[0]
    assert git(clone, "rev-parse", kept) == mine and git(clone, "show", f"{kept}:mine.txt") == "my work"


@pytest.mark.integration
def test_submission_branch_has_a_real_author(throwaway_series: Path, tmp_path: Path, workdir: Path) -> None:
    clone = tmp_path / "clone"
    shutil.copytree(workdir / "upstream", clone)
    git(clone, "checkout", "-q", "-b", "main", PIN.tag)
    git(clone, "branch", "-D", BRANCH)
    before = sorted(p.read_bytes() for p in throwaway_series.glob("*.patch"))
    args = ("apply", "--patches", str(throwaway_series), "--upstream", str(clone), "--rev", "main")
    overlay(*args, "--author", "Ada Lovelace <ada@example.org>", workdir=workdir)
    log = git(clone, "log", "--format=%an <%ae>|%cn <%ce>|%at", f"main..{BRANCH}").splitlines()
    assert log and all(line.startswith("Ada Lovelace <ada@example.org>|Ada Lovelace <ada@example.org>|") for line in log)
    assert all(abs(int(line.rsplit("|", 1)[1]) - time.time()) < 3600 for line in log)  # dated now, not the fixed date
    # same changes as the fixed-identity branch, and patches/ untouched
    assert git(clone, "rev-parse", f"{BRANCH}^{{tree}}") == git(workdir / "upstream", "rev-parse", f"{BRANCH}^{{tree}}")
    assert sorted(p.read_bytes() for p in throwaway_series.glob("*.patch")) == before
    bad = overlay(*args, "--author", "nobody", "--branch", "other", workdir=workdir, check=False)
    assert bad.returncode != 0 and "--author 'nobody': expected 'Name <email>'" in bad.stderr


@pytest.mark.integration
def test_first_apply_reads_the_source_tree_once(tmp_path: Path, workdir: Path, monkeypatch) -> None:
    calls = []

    def counted(*args, **kwargs):
        calls.append(args)
        return upstream.load_source_tree(*args, **kwargs)

    monkeypatch.setattr(series, "load_source_tree", counted)
    empty = tmp_path / "empty"
    empty.mkdir()
    repo = series.apply(PIN, workdir=Workdir(workdir), patches_dir=empty)
    assert len(calls) == 1  # verified before the repository is made, and the base commit made from it
    assert git(repo, "rev-parse", PIN.tag) == PIN.base_commit


@pytest.mark.integration
def test_clean_in_git_reads_odd_file_names(tmp_path: Path) -> None:
    project = tmp_path / "project"
    patches = project / "patches"
    patches.mkdir(parents=True)
    git(project, "init", "-q")
    names = ["0001-plain.patch", "0002-a space.patch", "0003-new\nline.patch", '0004-"quoted".patch',
             "0005-edited name.patch", "0006-old name.patch"]  # fmt: skip
    for name in names:
        (patches / name).write_text(f"{name}\n")
    (project / "outside.patch").write_text("not under patches/\n")
    git(project, "add", "-A")
    git(project, "commit", "-q", "-m", "patches")
    (patches / "0005-edited name.patch").write_text("edited\n")
    git(project, "mv", "patches/0006-old name.patch", "patches/0007-new\nname.patch")
    (patches / "0008-untracked file.patch").write_text("untracked\n")
    assert clean_in_git(patches) == {(patches / n).resolve() for n in names[:4]}
    outside = tmp_path / "not-a-checkout"
    outside.mkdir()
    assert clean_in_git(outside) == set()


def test_progress_lines_are_log_records_with_the_prefix(capsys) -> None:
    import logging

    from freetoken_overlay import cli

    package = logging.getLogger("freetoken_overlay")
    level, handlers = package.level, list(package.handlers)
    try:
        cli.setup_logging()
        cli.setup_logging(debug=True)  # configured once: one handler, however often it is called
        assert [h.get_name() for h in package.handlers].count("freetoken-overlay-cli") == 1
        logging.getLogger("freetoken_overlay.series").info("applying 2 patch(es)")
        logging.getLogger("freetoken_overlay.series").debug("a detail")
        cli.setup_logging()
        logging.getLogger("freetoken_overlay.series").debug("hidden")
        assert capsys.readouterr().out == "[freetoken-overlay] applying 2 patch(es)\n[freetoken-overlay] a detail\n"
    finally:
        package.handlers[:] = handlers
        package.setLevel(level)


def test_format_patch_flags_are_stable() -> None:
    for flag in ("--zero-commit", "--no-signature", "--full-index", "--no-numbered"):  # [PATCH], not [PATCH n/m]
        assert flag in FORMAT_PATCH_FLAGS


def test_series_hash(tmp_path: Path) -> None:
    assert series_hash(tmp_path) == hashlib.sha256(b"").hexdigest()[:12]
    (tmp_path / "0001-a.patch").write_bytes(b"a")
    (tmp_path / "0002-b.patch").write_bytes(b"b")
    (tmp_path / "README").write_bytes(b"not part of the series")
    assert series_hash(tmp_path) == hashlib.sha256(b"ab").hexdigest()[:12]
    assert series_hash() == series_hash(series.PATCHES_DIR)
