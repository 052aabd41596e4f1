"""CPU tests of freetoken_overlay: the pin, apply/export, the patched wheel (settings, the CLI and the
nox sessions are tests/test_settings_and_nox.py's).

Most tests drive ``python -m freetoken_overlay`` in a subprocess with a
temporary work directory (FT_OVERLAY_WORKDIR) whose wheel cache points at the
shared, verified one, so nothing is downloaded twice.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import os
import re
import shutil
import time
import zipfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freetoken_overlay import kernels, series, upstream
from freetoken_overlay.pin import DEFAULT_VERSION, PINS
from freetoken_overlay.export import FORMAT_PATCH_FLAGS, clean_in_git
from freetoken_overlay.series import BRANCH, series_hash
from freetoken_overlay.upstream import fetch_wheel, git_tree_id, source_files, verify_tree
from freetoken_overlay.util import (
    OverlayError,
    Workdir,
    python_tag,
    wheelhouse_dir,
)
from freetoken_overlay.wheel import local_version, patched_wheel_name
from freetoken_overlay.workrepo import series_branch

from conftest import PIN, commit_project, git, make_base_repo, overlay, read_dir  # noqa: E402  (tests/conftest.py: the overlay's helpers)


# --------------------------------------------------------------------------- the pin


@pytest.mark.parametrize("version", sorted(PINS))
def test_every_accepted_wheel_gives_the_pinned_tree(version: str, wheel_cache: Path) -> None:
    pin = PINS[version]
    wheelhouse = wheelhouse_dir()
    trees = set()
    for name in sorted(pin.wheels):
        if wheelhouse is not None and not (wheelhouse / name).is_file():
            pytest.skip(f"offline: {name} is not in the wheelhouse {wheelhouse}")
        wheel = fetch_wheel(pin, name, cache=wheel_cache, wheelhouse=wheelhouse)
        files = source_files(wheel)
        assert all(p.startswith("python/freetoken/") and not p.endswith(".so") for p in files)
        trees.add(git_tree_id(files))
    assert trees == {pin.tree_id}


@pytest.mark.parametrize("version", sorted(PINS))
def test_base_commit_is_deterministic(version: str, tmp_path: Path, wheel_cache: Path) -> None:
    pin = PINS[version]
    name = pin.wheel_name(python_tag())
    if wheelhouse_dir() is not None and not (wheelhouse_dir() / name).is_file():
        pytest.skip(f"offline: {name} is not in the wheelhouse")
    files = source_files(fetch_wheel(pin, name, cache=wheel_cache, wheelhouse=wheelhouse_dir()))
    commit = make_base_repo(pin, files, tmp_path / "repo")  # asserts tree and commit ids
    assert commit == pin.base_commit
    repo = tmp_path / "repo"
    branch = series_branch(pin)  # decode-gather, or decode-gather-<version> for another release
    assert git(repo, "rev-parse", f"{pin.tag}^{{commit}}", f"refs/heads/{branch}") == f"{commit}\n{commit}"
    assert git(repo, "rev-parse", "HEAD^{tree}") == pin.tree_id
    assert git(repo, "status", "--porcelain") == ""


tree_paths = st.lists(
    st.lists(st.sampled_from(["a", "b", "a.py", "a-b", "a_b", "z", "kernel", "0"]), min_size=1, max_size=3),
    min_size=1, max_size=8,
)  # fmt: skip


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(paths=tree_paths, data=st.binary(max_size=64))
def test_git_tree_id_matches_git(paths: list[list[str]], data: bytes, tmp_path_factory) -> None:
    files: dict[str, bytes] = {}
    for parts in paths:
        path = "/".join(parts)
        if any(f.startswith(path + "/") or path.startswith(f + "/") for f in files):
            continue  # a name cannot be both a file and a directory
        files[path] = data + path.encode()
    repo = tmp_path_factory.mktemp("tree")
    git(repo, "init", "-q")
    for path, content in files.items():
        (repo / path).parent.mkdir(parents=True, exist_ok=True)
        (repo / path).write_bytes(content)
    git(repo, "add", "-A")
    assert git_tree_id(files) == git(repo, "write-tree")


def test_tampered_wheel_is_refused_and_nothing_applied(tmp_path: Path, official_wheel: Path) -> None:
    name = official_wheel.name
    house = tmp_path / "house"
    house.mkdir()
    data = bytearray(official_wheel.read_bytes())
    data[len(data) // 2] ^= 0xFF
    (house / name).write_bytes(bytes(data))
    actual = hashlib.sha256(data).hexdigest()
    proc = overlay("apply", "--wheelhouse", str(house), workdir=tmp_path / "work", check=False)
    assert proc.returncode != 0
    assert name in proc.stderr and PIN.wheels[name] in proc.stderr and actual in proc.stderr
    assert not (tmp_path / "work" / "upstream").exists()


def test_tampered_cached_wheel_says_how_to_recover(tmp_path: Path, official_wheel: Path, monkeypatch) -> None:
    work = tmp_path / "work"
    cached = work / "wheels" / official_wheel.name
    cached.parent.mkdir(parents=True)
    cached.write_bytes(official_wheel.read_bytes()[:-100])  # truncated
    proc = overlay("apply", workdir=work, check=False)
    assert proc.returncode != 0 and "sha256 mismatch" in proc.stderr
    assert f"delete it (rm {cached}); the next run downloads and verifies a fresh copy" in proc.stderr
    assert not (work / "upstream").exists()
    # Following the advice: the next fetch downloads (here: a stand-in for pip) and verifies a fresh copy.
    cached.unlink()
    monkeypatch.setattr(upstream, "_pip_download", lambda pin, name, dest: Path(shutil.copy(official_wheel, dest)))
    assert fetch_wheel(PIN, official_wheel.name, cache=cached.parent) == cached
    assert cached.read_bytes() == official_wheel.read_bytes()


def test_tree_mismatch_is_refused(official_wheel: Path) -> None:
    wheel = official_wheel
    files = source_files(wheel)
    files["python/freetoken/extra.py"] = b"x = 1\n"
    with pytest.raises(OverlayError) as info:
        verify_tree(PIN, wheel, files)
    message = str(info.value)
    assert wheel.name in message and PIN.tree_id in message and git_tree_id(files) in message


# --------------------------------------------------------------------------- apply / export


def test_empty_series_applies_base_only(tmp_path: Path, workdir: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    overlay("apply", "--patches", str(empty), workdir=workdir)
    repo = workdir / "upstream"
    assert git(repo, "rev-parse", BRANCH, PIN.tag) == f"{PIN.base_commit}\n{PIN.base_commit}"
    overlay("export", "--patches", str(empty), workdir=workdir)
    assert read_dir(empty) == {}


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


# --------------------------------------------------------------------------- patched wheel


def _record_ok(archive: zipfile.ZipFile) -> list[str]:
    record_name = next(n for n in archive.namelist() if n.endswith(".dist-info/RECORD"))
    rows = list(csv.reader(io.StringIO(archive.read(record_name).decode())))
    assert sorted(r[0] for r in rows) == sorted(archive.namelist())
    for path, digest, size in rows:
        if path == record_name:
            assert digest == size == ""
            continue
        data = archive.read(path)
        expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        assert (digest, int(size)) == (f"sha256={expected}", len(data)), path
    return [r[0] for r in rows]


def test_patched_wheel(throwaway_series: Path, workdir: Path, official_wheel: Path) -> None:
    overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir)
    series_id = series_hash(throwaway_series)
    wheel = workdir / "dist" / patched_wheel_name(PIN, series_id, python_tag())
    version = local_version(PIN, series_id)
    assert version == f"{DEFAULT_VERSION}+dg.{series_id}"
    official = zipfile.ZipFile(official_wheel)
    with zipfile.ZipFile(wheel) as archive:
        names = _record_ok(archive)
        assert f"freetoken-{version}.dist-info/METADATA" in names
        assert not any(n.startswith(f"freetoken-{DEFAULT_VERSION}.dist-info/") for n in names)
        assert f"\nVersion: {version}\n" in archive.read(f"freetoken-{version}.dist-info/METADATA").decode()
        assert f'__version__ = "{version}"' in archive.read("freetoken/version.py").decode()
        assert "freetoken/cache_report.py" not in names
        assert archive.read("freetoken/kernel/decode_gather.py").startswith(b'"""Throwaway')
        assert archive.read("freetoken/moe/offload_cache.py").endswith(b"# decode-gather: throwaway change\n")
        for name in official.namelist():
            if name.endswith(".so"):
                assert archive.read(name) == official.read(name)
    first = wheel.read_bytes()
    wheel.unlink()
    overlay("build-wheel", "--patches", str(throwaway_series), workdir=workdir)
    assert wheel.read_bytes() == first  # deterministic


def test_installed_freetoken_is_the_patched_wheel() -> None:
    try:
        installed = importlib.metadata.version("freetoken")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("freetoken is not installed here (run the tests with `nox -s test`)")
    import freetoken

    assert installed == freetoken.__version__ == local_version(PIN, series_hash())
    # The import closure of the patched paths is installed (requirements.IMPORT_CLOSURE).
    import freetoken.kernel.aot
    import freetoken.kernel.fast_index_copy
    import freetoken.moe.offload_cache


# --------------------------------------------------------------------------- kernels


def test_kernel_specs_are_selected_by_prefix() -> None:
    pytest.importorskip("freetoken.kernel.aot", reason="needs the patched freetoken (nox -s test)")
    assert kernels.SPEC_PREFIX == "freetoken__decode_gather"
    assert all(name.startswith(kernels.SPEC_PREFIX) for name in kernels.select_specs())
    assert kernels.select_specs("freetoken__fast_index_copy_update_flag") == ["freetoken__fast_index_copy_update_flag"]


def test_aot_kernel_builds_without_gpu(tmp_path: Path) -> None:
    pytest.importorskip("freetoken.kernel.aot", reason="needs the patched freetoken (nox -s test)")
    if shutil.which("ninja") is None:
        pytest.skip("no ninja on PATH (the build session installs it)")
    home = kernels.find_cuda_home(Workdir(tmp_path))
    if home is None:
        pytest.skip("no CUDA toolkit (nvcc) here; `nox -s build` would install one from PyPI")
    from freetoken.kernel.aot import compile_and_package_kernels

    env = {"CUDA_HOME": str(home), kernels.CUDA_ARCH_LIST_ENV: "9.0"}
    old = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        built = compile_and_package_kernels(
            out_dir=tmp_path / "cache", build_dir=tmp_path / "build", specs=["freetoken__fast_index_copy_update_flag"]
        )
    finally:
        for key, value in old.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    assert [p.name for p in built] == ["freetoken__fast_index_copy_update_flag.so"]


@pytest.mark.gpu
def test_kernel_cache_loads_on_gpu() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    cache = Workdir.from_env().kernel_cache
    built = sorted(cache.glob("*/*.so"))
    if not built:
        pytest.skip(f"no kernel cache at {cache} (run `nox -s build`; the series may add no kernels yet)")
    import tvm_ffi

    for path in built:
        assert tvm_ffi.load_module(str(path)) is not None
