"""CPU checks of suite.results' history: the writer moves the document it replaces into
``results/<device>/history/<tree-id>/``, numbered in the order the runs were replaced, and never
overwrites a kept file."""

from __future__ import annotations

import json

import pytest

from suite import results


@pytest.fixture
def res(monkeypatch, tmp_path):
    """A scratch results root for device ``h200`` (the slug and provenance caches cleared around it)."""
    monkeypatch.setenv(results.ROOT_ENV, str(tmp_path / "res"))
    monkeypatch.setenv(results.DEVICE_ENV, "h200")
    results._this_device.cache_clear()
    results.provenance.cache_clear()
    yield tmp_path / "res"
    results._this_device.cache_clear()


def _prov(monkeypatch, tree: str | None, series: str | None = "s" * 12) -> None:
    monkeypatch.setattr(results, "provenance", lambda: {"series_hash": series, "series_from": "x", "tree": tree, "patch_id": None})


def test_save_moves_the_document_it_replaces_into_the_history_of_its_tree(res, monkeypatch):
    _prov(monkeypatch, "a" * 40)
    first = results.save("step_pdl", machine={"device_slug": "h200"}, args={"run": 1})
    before = first.read_text()
    results.save("step_pdl", machine={"device_slug": "h200"}, args={"run": 2})
    kept = res / "h200" / "history" / f"tree-{'a' * 12}" / "step_pdl.1.json"
    assert kept.read_text() == before  # the bytes as written, moved
    assert json.loads(first.read_text())["args"] == {"run": 2}
    _prov(monkeypatch, "b" * 40)
    results.save("step_pdl", machine={"device_slug": "h200"}, args={"run": 3})
    assert json.loads(kept.with_name("step_pdl.2.json").read_text())["args"] == {"run": 2}  # run 2 was tree a's too
    results.save("step_pdl", machine={"device_slug": "h200"}, args={"run": 4})
    tree_b = res / "h200" / "history" / f"tree-{'b' * 12}" / "step_pdl.1.json"
    assert json.loads(tree_b.read_text())["args"] == {"run": 3}
    assert [p.name for p in results.history("step_pdl", "h200", "a" * 40, res)] == ["step_pdl.1.json", "step_pdl.2.json"]
    assert len(results.history("step_pdl", "h200", base=res)) == 3
    assert results.devices(res) == ["h200"] and results.load("step_pdl", "h200", res)["args"] == {"run": 4}


def test_a_kind_in_a_subfolder_and_a_document_without_a_tree(res, monkeypatch):
    _prov(monkeypatch, None)
    results.save("gpu", machine={"device_slug": "h200"}, passed=True)
    results.save("gpu", machine={"device_slug": "h200"}, passed=False)
    kept = res / "h200" / "history" / f"series-{'s' * 12}" / "conformance" / "gpu.1.json"
    assert json.loads(kept.read_text())["passed"] is True
    _prov(monkeypatch, None, series=None)
    results.save("gpu", machine={"device_slug": "h200"}, passed=True)
    results.save("gpu", machine={"device_slug": "h200"}, passed=None)
    assert (res / "h200" / "history" / "tree-unknown" / "conformance" / "gpu.1.json").is_file()


def test_a_file_that_is_not_json_is_kept_too(res, monkeypatch):
    _prov(monkeypatch, "a" * 40)
    target = results.path("e2e", "h200")
    target.parent.mkdir(parents=True)
    target.write_text("not json {")
    results.save("e2e", device="h200", points=[])
    assert (res / "h200" / "history" / "tree-unknown" / "e2e.1.json").read_text() == "not json {"


def test_a_rerun_that_changes_nothing_keeps_no_copy(res, monkeypatch):
    _prov(monkeypatch, "a" * 40)
    results.save("sass", reports=[1])  # untimestamped: the same run gives the same bytes
    results.save("sass", reports=[1])
    assert not (res / "history").exists()
    results.save("sass", reports=[2])
    assert json.loads((res / "history" / f"tree-{'a' * 12}" / "sass.1.json").read_text())["reports"] == [1]


def test_a_dry_run_directory_keeps_its_own_history(res, monkeypatch, tmp_path):
    _prov(monkeypatch, "a" * 40)
    out = tmp_path / "dry"
    results.save("step_pdl", out_dir=out, args={"run": 1})
    results.save("step_pdl", out_dir=out, args={"run": 2})
    assert json.loads((out / "history" / f"tree-{'a' * 12}" / "step_pdl.1.json").read_text())["args"] == {"run": 1}
    assert not res.exists()


def test_it_refuses_to_overwrite_a_kept_file_and_leaves_both(tmp_path):
    src, dst = tmp_path / "new.json", tmp_path / "history" / "old.json"
    src.write_text("new")
    dst.parent.mkdir()
    dst.write_text("old")
    with pytest.raises(FileExistsError, match="not overwriting"):
        results.move_new(src, dst)
    assert src.read_text() == "new" and dst.read_text() == "old"


def test_numbering_follows_the_last_kept_run(res, monkeypatch):
    """A kept run .3 (say, one deleted by hand before it) makes the next .4: no number is reused."""
    _prov(monkeypatch, "a" * 40)
    folder = res / "h200" / "history" / f"tree-{'a' * 12}"
    folder.mkdir(parents=True)
    (folder / "step_pdl.3.json").write_text("{}")
    results.save("step_pdl", machine={"device_slug": "h200"}, args={"run": 1})
    results.save("step_pdl", machine={"device_slug": "h200"}, args={"run": 2})
    assert (folder / "step_pdl.3.json").read_text() == "{}"
    assert json.loads((folder / "step_pdl.4.json").read_text())["args"] == {"run": 1}


def test_a_run_that_saves_as_it_goes_replaces_only_its_own_save(res, monkeypatch):
    _prov(monkeypatch, "a" * 40)
    results.save("e2e", device="h200", runs=[0])  # an earlier measurement
    results.save("e2e", device="h200", runs=[1])  # this one's first save keeps it
    results.save("e2e", device="h200", keep_replaced=False, runs=[1, 2])  # its later saves replace their own
    kept = results.history("e2e", "h200", "a" * 40, res)
    assert [json.loads(p.read_text())["runs"] for p in kept] == [[0]]
    assert results.load("e2e", "h200", res)["runs"] == [1, 2]
