"""CPU tests of freetoken_overlay/pin.py and upstream.py: every accepted wheel gives the pinned tree and base commit,
a tampered wheel or tree is refused."""

from __future__ import annotations

import hashlib
import shutil
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from freetoken_overlay import upstream
from freetoken_overlay.pin import PINS
from freetoken_overlay.upstream import fetch_wheel, git_tree_id, source_files, verify_tree
from freetoken_overlay.util import OverlayError, python_tag, wheelhouse_dir
from freetoken_overlay.workrepo import series_branch

from helpers import PIN, git, make_base_repo, overlay  # noqa: E402

pytestmark = pytest.mark.integration  # real git, nox or the CLI in a subprocess: nox -s quick leaves it out


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
