"""Fetch and verify the pinned official wheels; derive the pure-source tree.

A wheel is taken from the offline wheelhouse ($FT_OVERLAY_WHEELHOUSE or
``--wheelhouse``) when one is set, else from the cache ``<workdir>/wheels/``,
else downloaded with ``pip download`` (so pip's own index, proxy and
certificate settings apply, and its progress bar shows).  Whatever the source,
the file's sha256 and the git tree id of its source tree must match the pin,
or it is refused before anything is written.
"""

from __future__ import annotations

import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Iterable, Mapping
from pathlib import Path

from .pin import PLATFORM_TAG, Pin
from .util import OverlayError, python_tag, verbose, verify_sha256

logger = logging.getLogger(__name__)

#: Where the package lives in the upstream repository (and in our work repo).
SOURCE_PREFIX = "python/"
PACKAGE = "freetoken"


def source_files(wheel: Path) -> dict[str, bytes]:
    """The pure-source tree of ``wheel``: ``python/freetoken/...`` path -> bytes.  Only ``freetoken/`` entries are
    kept; compiled extension modules (``*.so``) and the ``.dist-info`` directory are left out."""
    with zipfile.ZipFile(wheel) as archive:
        files = {SOURCE_PREFIX + info.filename: archive.read(info) for info in archive.infolist()
                 if not info.is_dir() and info.filename.startswith(f"{PACKAGE}/")
                 and not info.filename.endswith(".so")}  # fmt: skip
    if not files:
        raise OverlayError(f"{wheel}: holds no {PACKAGE}/ package")
    return files


def _git_object_id(kind: bytes, body: bytes) -> bytes:
    return hashlib.sha1(kind + b" " + str(len(body)).encode() + b"\0" + body).digest()


def git_tree_id(files: Mapping[str, bytes]) -> str:
    """The git (sha1) tree id of ``files`` (path -> bytes), every file mode 100644: what ``git add`` + ``git
    write-tree`` give for the same files, without needing git."""
    root: dict[str, object] = {}
    for path, data in files.items():
        *dirs, leaf = path.split("/")
        node = root
        for part in dirs:
            node = node.setdefault(part, {})  # type: ignore[assignment]
        node[leaf] = data

    def tree(node: Mapping[str, object]) -> bytes:
        # git orders entries by name, a directory's name compared as if it ended in "/".
        def key(item: tuple[str, object]) -> bytes:
            name, value = item
            return name.encode() + (b"/" if isinstance(value, dict) else b"")

        body = b""
        for name, value in sorted(node.items(), key=key):
            if isinstance(value, dict):
                body += b"40000 " + name.encode() + b"\0" + tree(value)
            else:
                assert isinstance(value, bytes)
                body += b"100644 " + name.encode() + b"\0" + _git_object_id(b"blob", value)
        return _git_object_id(b"tree", body)

    return tree(root).hex()


def verify_tree(pin: Pin, wheel: Path, files: Mapping[str, bytes]) -> None:
    """Refuse ``wheel`` unless its source tree id is the pinned one."""
    actual = git_tree_id(files)
    if actual != pin.tree_id:
        raise OverlayError(f"{wheel}: source tree id mismatch for FreeToken {pin.version} "
                           f"(expected {pin.tree_id}, actual {actual}); refusing to use it")  # fmt: skip


def _pip_download(pin: Pin, name: str, dest: Path) -> Path:
    """Download the official wheel ``name`` into ``dest`` with pip."""
    py_tag = name.split("-")[2]  # cp312
    py_version = f"{py_tag[2]}.{py_tag[3:]}"
    cmd = [
        sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:",
        "--no-cache-dir", "--disable-pip-version-check",
        "--python-version", py_version, "--implementation", "cp", "--abi", py_tag,
        "--platform", PLATFORM_TAG, "-d", str(dest), f"freetoken=={pin.version}",
    ]  # fmt: skip
    logger.info(f"downloading {name} ...")
    quiet = not verbose()
    proc = subprocess.run(cmd, check=False, stdout=subprocess.PIPE if quiet else None,
                          stderr=subprocess.STDOUT if quiet else None, text=True)  # fmt: skip
    path = dest / name
    if proc.returncode != 0 or not path.is_file():
        got = ", ".join(p.name for p in dest.iterdir()) or "nothing"
        output = f"\n{proc.stdout.strip()}" if quiet and proc.stdout else ""
        raise OverlayError(f"pip download of {name} failed (exit {proc.returncode}; got {got}){output}")
    return path


def fetch_wheel(pin: Pin, name: str, *, cache: Path, wheelhouse: Path | None = None) -> Path:
    """Path of the verified official wheel ``name`` (a file name in ``pin.wheels``)."""
    expected = pin.wheels[name]
    if wheelhouse is not None:
        path = wheelhouse / name
        if not path.is_file():
            raise OverlayError(f"offline wheelhouse {wheelhouse} has no {name}")
        try:
            verify_sha256(path, expected)
        except OverlayError as exc:
            raise OverlayError(f"{exc}\nreplace it with the official {name} (sha256 {expected})") from None
        return path
    path = cache / name
    if path.is_file():
        try:
            verify_sha256(path, expected)  # a tampered or truncated cache file is refused, not replaced
        except OverlayError as exc:
            raise OverlayError(f"{exc}\nto recover, delete it (rm {path}); the next run downloads and verifies a "
                               "fresh copy") from None  # fmt: skip
        return path
    cache.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        downloaded = _pip_download(pin, name, Path(tmp))
        verify_sha256(downloaded, expected)
        os.replace(downloaded, path)
    logger.info(f"verified sha256 of {name}; cached at {path}")
    return path


def preferred_wheel(pin: Pin, *, wheelhouse: Path | None, cache: Path) -> str:
    """The accepted wheel to read the source tree from: this interpreter's if pinned,
    else one already at hand (all accepted wheels give the same tree)."""
    own = f"freetoken-{pin.version}-{python_tag()}-{python_tag()}-{PLATFORM_TAG}.whl"
    if own in pin.wheels:
        return own
    at_hand = (name for folder in (wheelhouse, cache) if folder is not None for name in sorted(pin.wheels)
               if (folder / name).is_file())  # fmt: skip
    return next(at_hand, min(pin.wheels))


def load_source_tree(pin: Pin, *, cache: Path, wheelhouse: Path | None = None, names: Iterable[str] | None = None
                     ) -> dict[str, bytes]:  # fmt: skip
    """The verified pure-source tree of ``pin`` (from each wheel in ``names``,
    default one preferred wheel); every wheel's hash and tree id are checked."""
    files: dict[str, bytes] = {}
    for name in names or [preferred_wheel(pin, wheelhouse=wheelhouse, cache=cache)]:
        wheel = fetch_wheel(pin, name, cache=cache, wheelhouse=wheelhouse)
        files = source_files(wheel)
        verify_tree(pin, wheel, files)
        logger.info(f"verified source tree of {name}: {pin.tree_id} ({len(files)} files)")
    return files


def write_tree(files: Mapping[str, bytes], dest: Path) -> None:
    """Write ``files`` under ``dest`` (mode 0644)."""
    for rel, data in files.items():
        path = dest / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        path.chmod(0o644)
