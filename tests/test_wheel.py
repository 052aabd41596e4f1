"""CPU tests of freetoken_overlay/wheel.py: the patched wheel (RECORD, version, contents, deterministic) and the
installed one."""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.metadata
import io
import zipfile
from pathlib import Path

import pytest

from freetoken_overlay.pin import DEFAULT_VERSION
from freetoken_overlay.series import series_hash
from freetoken_overlay.util import python_tag
from freetoken_overlay.wheel import local_version, patched_wheel_name

from helpers import PIN, overlay  # noqa: E402

pytestmark = pytest.mark.integration  # real git, nox or the CLI in a subprocess: nox -s quick leaves it out


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
