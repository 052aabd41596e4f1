"""Build the patched wheel: the official wheel with the series' files swapped in.

The official wheel for the target interpreter is rewritten, not rebuilt from
source, so its compiled extension modules stay exactly upstream's:

* every file the series adds or changes under ``python/freetoken/`` replaces
  (or joins) ``freetoken/...`` in the wheel; files it deletes are dropped;
* the version becomes ``<version>+dg.<series hash>``: ``.dist-info`` renamed,
  ``Version:`` in METADATA, ``__version__`` in ``freetoken/version.py``;
* RECORD is regenerated (sha256 and size of every file).

The result is deterministic: same series, same wheel bytes.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import logging
import os
import re
import sys
import tempfile
import zipfile
from dataclasses import dataclass
from pathlib import Path

from .pin import PLATFORM_TAG, Pin
from .series import ensure_applied, series_hash
from .workrepo import series_branch
from .upstream import PACKAGE, SOURCE_PREFIX, fetch_wheel
from .util import OverlayError, Workdir, git, git_bytes, python_tag, run_checked

logger = logging.getLogger(__name__)

#: Local version label of patched wheels: ``0.2.1+dg.<series hash>``.
LOCAL_LABEL = "dg"


def local_version(pin: Pin, series: str) -> str:
    return f"{pin.version}+{LOCAL_LABEL}.{series}"


def patched_wheel_name(pin: Pin, series: str, py_tag: str) -> str:
    return f"{PACKAGE}-{local_version(pin, series)}-{py_tag}-{py_tag}-{PLATFORM_TAG}.whl"


@dataclass(frozen=True)
class SeriesChanges:
    """What the series does to ``python/freetoken/``, as wheel paths (``freetoken/...``)."""

    files: dict[str, tuple[bytes, int]]  # added or modified: path -> (bytes, git mode)
    deleted: frozenset[str]


def series_changes(repo: Path, pin: Pin) -> SeriesChanges:
    """The files under ``python/freetoken/`` that ``upstream-<v>..<series branch>`` changes."""
    raw = git(repo, "diff", "--raw", "-z", "--no-renames", "--no-abbrev", pin.tag, f"refs/heads/{series_branch(pin)}",
              "--", f"{SOURCE_PREFIX}{PACKAGE}/").stdout  # fmt: skip
    fields = raw.split("\0")
    files: dict[str, tuple[bytes, int]] = {}
    deleted: set[str] = set()
    for meta, path in zip(fields[0::2], fields[1::2]):
        _, new_mode, _, new_blob, status = meta.lstrip(":").split()
        wheel_path = path.removeprefix(SOURCE_PREFIX)
        if status == "D":
            deleted.add(wheel_path)
        else:
            data = git_bytes(repo, "cat-file", "blob", new_blob)
            files[wheel_path] = (data, int(new_mode, 8))
    return SeriesChanges(files=files, deleted=frozenset(deleted))


def _record(entries: list[tuple[zipfile.ZipInfo, bytes]], record_name: str) -> bytes:
    """RECORD (a CSV file): path, sha256=<urlsafe base64, unpadded>, size; RECORD itself last."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for info, data in entries:
        digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
        writer.writerow((info.filename, f"sha256={digest}", len(data)))
    writer.writerow((record_name, "", ""))
    return out.getvalue().encode()


def _set_metadata_version(metadata: bytes, old: str, new: str) -> bytes:
    headers, sep, body = metadata.partition(b"\n\n")
    pattern = rb"^Version: " + re.escape(old.encode()) + rb"$"
    headers, count = re.subn(pattern, b"Version: " + new.encode(), headers, flags=re.MULTILINE)
    if count != 1:
        raise OverlayError(f"METADATA has {count} 'Version: {old}' header lines, expected 1")
    return headers + sep + body


def _set_module_version(source: bytes, old: str, new: str) -> bytes:
    pattern = rb"""^(__version__\s*=\s*)(["'])""" + re.escape(old.encode()) + rb"""\2"""
    return re.sub(pattern, lambda m: m.group(1) + m.group(2) + new.encode() + m.group(2), source,
                  flags=re.MULTILINE)  # fmt: skip


def rewrite_wheel(official: Path, out: Path, pin: Pin, series: str, changes: SeriesChanges) -> None:
    """Write the patched wheel ``out`` from ``official`` and the series' ``changes``."""
    new_version = local_version(pin, series)
    old_info, new_info = f"{PACKAGE}-{pin.version}.dist-info/", f"{PACKAGE}-{new_version}.dist-info/"
    entries: list[tuple[zipfile.ZipInfo, bytes]] = []
    with zipfile.ZipFile(official) as src:
        infos = src.infolist()
        date_time = infos[0].date_time
        if missing := {p for p in changes.deleted if p not in src.namelist()}:
            raise OverlayError(f"the series deletes files the wheel does not have: {sorted(missing)}")
        for info in infos:
            name = info.filename
            if name in changes.deleted or name == f"{old_info}RECORD":
                continue
            data = changes.files[name][0] if name in changes.files else src.read(info)
            if name.startswith(old_info):
                name = new_info + name[len(old_info) :]
                if name == f"{new_info}METADATA":
                    data = _set_metadata_version(data, pin.version, new_version)
            entries.append((_zipinfo(name, date_time, info.external_attr), data))
        added = sorted(set(changes.files) - set(src.namelist()))
    for name in added:
        data, mode = changes.files[name]
        entries.insert(_first_dist_info(entries), (_zipinfo(name, date_time, (0o100000 | (mode & 0o777)) << 16), data))
    for index, (info, data) in enumerate(entries):
        if info.filename == f"{PACKAGE}/version.py":
            entries[index] = (info, _set_module_version(data, pin.version, new_version))

    record_name = f"{new_info}RECORD"
    entries.append((_zipinfo(record_name, date_time, 0o100644 << 16), _record(entries, record_name)))

    out.parent.mkdir(parents=True, exist_ok=True)
    with (
        tempfile.NamedTemporaryFile(dir=out.parent, prefix=".wheel-", delete=False) as tmp,
        zipfile.ZipFile(tmp, "w", compression=zipfile.ZIP_DEFLATED) as dst,
    ):
        for info, data in entries:
            dst.writestr(info, data)
    os.chmod(tmp.name, 0o644)
    os.replace(tmp.name, out)
    logger.info(f"wrote {out} ({len(changes.files) - len(added)} file(s) replaced, {len(added)} added, "
                f"{len(changes.deleted)} deleted)")  # fmt: skip


def _zipinfo(name: str, date_time: tuple[int, int, int, int, int, int], external_attr: int) -> zipfile.ZipInfo:
    info = zipfile.ZipInfo(name, date_time=date_time)
    info.external_attr = external_attr
    info.compress_type = zipfile.ZIP_DEFLATED
    return info


def _first_dist_info(entries: list[tuple[zipfile.ZipInfo, bytes]]) -> int:
    return next((index for index, (info, _) in enumerate(entries) if ".dist-info/" in info.filename), len(entries))


def build_wheel(pin: Pin, *, workdir: Workdir, patches_dir: Path | None = None, wheelhouse: Path | None = None,
                py_tag: str | None = None) -> Path:  # fmt: skip
    """The patched wheel for ``py_tag`` (default: this interpreter) in ``<workdir>/dist/``.  Applies the series first
    if the work repository is missing or stale; an existing wheel for the current series hash is reused."""
    py_tag = py_tag or python_tag()
    official_name = pin.wheel_name(py_tag)
    repo = ensure_applied(pin, workdir=workdir, patches_dir=patches_dir, wheelhouse=wheelhouse)
    series = series_hash(patches_dir)
    out = workdir.dist / patched_wheel_name(pin, series, py_tag)
    if out.is_file():
        logger.info(f"patched wheel is up to date: {out}")
        return out
    official = fetch_wheel(pin, official_name, cache=workdir.wheels, wheelhouse=wheelhouse)
    rewrite_wheel(official, out, pin, series, series_changes(repo, pin))
    for stale in workdir.dist.glob(f"{PACKAGE}-{pin.version}+{LOCAL_LABEL}.*-{py_tag}-*.whl"):
        if stale != out:
            stale.unlink()
    return out


def install_wheel(wheel: Path) -> None:
    """``pip install --no-deps --force-reinstall`` the wheel into this interpreter, unless
    its version (which names the series) is installed already."""
    version = wheel.name.split("-")[1]
    try:
        installed = importlib.metadata.version(PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        installed = None
    if installed == version:
        logger.info(f"{PACKAGE} {version} is installed already: {wheel.name}")
        return
    logger.info(f"installing {wheel.name}")
    run_checked([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "--force-reinstall",
                 "--disable-pip-version-check", str(wheel)], what="installing the patched wheel")  # fmt: skip
