"""FT_OVERLAY_KERNEL_SET: the GPU sessions' full kernel cache (the series' kernels and upstream's
fast_index_copy_multi widths) is built once and kept, also by a later build of the series' set;
a value that is no set is refused, naming the variable, the value and the sets."""

from __future__ import annotations

from pathlib import Path

import pytest

from freetoken_overlay import kernel_cache
from freetoken_overlay.util import OverlayError, Workdir


def test_a_bad_kernel_set_is_refused(monkeypatch) -> None:
    monkeypatch.setenv(kernel_cache.KERNEL_SET_ENV, "everything")
    with pytest.raises(OverlayError, match="FT_OVERLAY_KERNEL_SET='everything' is not a kernel set; allowed values: series"):
        kernel_cache.kernel_set()
    monkeypatch.setenv(kernel_cache.KERNEL_SET_ENV, " ")
    assert kernel_cache.kernel_set() == "series"


def test_the_full_set_adds_upstreams_copy_widths() -> None:
    pytest.importorskip("freetoken.kernel.aot", reason="needs the patched freetoken (nox -s test)")
    widths = kernel_cache.select_specs(kernel_cache.FULL_SET_PREFIX)
    assert widths == [f"freetoken__fast_index_copy_multi_1024_{b}" for b in (8, 32, 64)]  # kernel/aot.py's widths


def test_a_full_cache_is_built_once_and_kept_by_a_series_build(tmp_path: Path, monkeypatch, fake_kernel_build) -> None:
    workdir = Workdir(tmp_path / "work")
    compiled = fake_kernel_build

    series = ["freetoken__decode_gather_16_4_8192"]
    widths = [f"freetoken__fast_index_copy_multi_1024_{b}" for b in (8, 32, 64)]
    prefix = kernel_cache.SPEC_PREFIX
    monkeypatch.setattr(kernel_cache, "select_specs", lambda p=prefix: series if p == prefix else widths)
    monkeypatch.setenv(kernel_cache.KERNEL_SET_ENV, "full")
    for _ in range(2):
        kernel_cache.build_kernel_cache(workdir, pip_args=[])
    monkeypatch.setenv(kernel_cache.KERNEL_SET_ENV, "series")
    kernel_cache.build_kernel_cache(workdir, pip_args=[])  # the full cache serves the series' set: kept
    assert compiled == [sorted(series + widths)]
    (workdir.kernel_cache / widths[1] / f"{widths[1]}.so").unlink()  # a kernel of the cache gone: rebuilt
    kernel_cache.build_kernel_cache(workdir, pip_args=[])
    assert compiled[1:] == [series]


def test_a_series_change_outside_the_kernels_keeps_the_cache(tmp_path: Path, monkeypatch, fake_kernel_build) -> None:
    """Any change to the series is a new freetoken version, so the cache was compiled again (16 s) even where the
    kernel sources were byte for byte the same; now it is kept and recorded for the new version.  A change to the
    kernel sources still compiles it."""
    import freetoken

    workdir, compiled = Workdir(tmp_path / "work"), fake_kernel_build
    series = kernel_cache.SPEC_PREFIX
    monkeypatch.setattr(kernel_cache, "select_specs", lambda p=series: [f"{series}_16_4_8192"] if p == series else [])
    kernel_cache.build_kernel_cache(workdir, pip_args=[])
    monkeypatch.setattr(freetoken, "__version__", "0.2.1+dg.another")
    kernel_cache.build_kernel_cache(workdir, pip_args=[])
    assert len(compiled) == 1 and kernel_cache.read_manifest(workdir.kernel_cache)["freetoken"] == "0.2.1+dg.another"
    monkeypatch.setattr(kernel_cache, "_kernel_sources_sha256", lambda: "0" * 64)
    kernel_cache.build_kernel_cache(workdir, pip_args=[])
    assert len(compiled) == 2
