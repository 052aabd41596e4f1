"""CPU checks of the GPU tier's own tooling (no GPU, not marked gpu): the compute-sanitizer log parser and its dry run.
gpukit's own checks are in tests/test_gpukit.py."""

from __future__ import annotations

import tempfile

import pytest

from conformance.gpu import run_sanitizer, sanitize_case
from suite import results
from suite.commands import MEASUREMENTS
from suite.geometry import OPT_IN_RINGS, Ring


@pytest.mark.parametrize("text, errors, warnings", [
    ("========= ERROR SUMMARY: 0 errors\n", 0, 0),
    ("========= Invalid __global__ read of size 16 bytes\n========= ERROR SUMMARY: 3 errors\n", 3, 0),
    ("========= RACECHECK SUMMARY: 2 hazards displayed (1 error, 1 warning)\n", 1, 1),
    ("========= RACECHECK SUMMARY: 0 hazards displayed (0 errors, 0 warnings)\n", 0, 0),
    ("Segmentation fault\n", None, 0),  # no closing line: the tool or the process died
])  # fmt: skip
def test_sanitizer_log_parser(text: str, errors: int | None, warnings: int) -> None:
    got = run_sanitizer.parse_summary(text)
    assert (got["errors"], got["warnings"]) == (errors, warnings)


def test_the_dry_run_leaves_nothing_and_its_sample_is_a_document(tmp_path, monkeypatch) -> None:
    """It left a /dev/shm/sanitizer-dry-* folder per run (a sample summary written by hand); now it writes one only
    where --out says, through suite.results.save like every document."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    assert run_sanitizer.main(["--dry-run"]) == 0
    assert list(tmp_path.iterdir()) == [tmp_path / "tmp"] and not any((tmp_path / "tmp").iterdir())
    assert run_sanitizer.main(["--dry-run", "--out", str(tmp_path / "out")]) == 0
    doc = results.read_json(tmp_path / "out" / "sanitize.json")
    assert doc["schema"] == MEASUREMENTS["sanitize"].schema and doc["dry_run"] is True and "provenance" in doc


def test_the_sanitizer_case_takes_rings_as_the_variable_spells_them(capsys) -> None:
    """``--rings``: rings besides the default, each ``<ctas>x<stages>x<chunk_bytes>`` as FREETOKEN_DECODE_GATHER_RING
    and the series' benchmark spell them; another spelling is refused, naming the value and the one allowed."""
    args = sanitize_case.parse_args(["--rings", "16x4x8192", "8x3x16384"])
    assert args.rings == [Ring(16, 4, 8192), Ring(8, 3, 16384)]
    assert set(OPT_IN_RINGS) <= set(sanitize_case.parse_args([]).rings)
    for other in ("16x4x8K", "4x16384", "default,8x3x16384"):
        with pytest.raises(SystemExit):
            sanitize_case.parse_args(["--rings", other])
        assert f"--rings: ring '{other}': expected <ctas>x<stages>x<chunk_bytes> in integers" in capsys.readouterr().err
