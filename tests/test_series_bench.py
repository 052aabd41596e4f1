"""CPU checks of bench.series_bench: it runs the work repo's benchmark with ``--json`` (and, with
``--markdown``, a file for the table), keeps the JSON as a series_bench document and the table
beside it with the document's provenance; a ``--model`` run's geometries read typed."""

from __future__ import annotations

import json

from bench import series_bench
from suite.commands import MEASUREMENTS
from suite.models import SeriesBench
from suite.models.docs import SeriesGeometry
from suite.stats import Comparison

GEOMETRY = {"model": "gpt-oss-20b", "quant_format": "mxfp4_triton", "expert_bytes": 13236480, "layers": 24,
            "banks": [{"name": "gate_up_blocks", "row_bytes": 8294400}], "skipped": None,
            "auto": {"chose": "bpb8", "default": "bpb8", "line": "decode gather auto: bpb8 kept"},
            "rows": [{"n": 1, "regime": "decode", "median_us": {"upstream": 270.0, "upstream_aa": 270.1, "tma": 269.0},
                      "rounds_us": {}, "aa_spread": 0.002, "verified": 150, "ratio": {"tma": 1.0037},
                      "verdict": {"tma": "faster"}, "gbps": {"upstream": 49.0}, "rounds": 5, "cut": False}]}  # fmt: skip

FAKE = """\
args = sys.argv[1:]
json.dump({"schema": "freetoken-bench-decode-gather/2", "machine": {"gpu": "x"}, "args": {"model": "all"},
           "geometries": [GEOMETRY], "failures": []}, open(args[args.index("--json") + 1], "w"))
if "--markdown" in args:
    open(args[args.index("--markdown") + 1], "w").write("| model | n |\\n")
print("ARGS", args)
"""


def _workdir(tmp_path, monkeypatch):
    script = tmp_path / "work" / "upstream" / "benchmarks" / "bench_decode_gather.py"
    script.parent.mkdir(parents=True)
    script.write_text(f"import json, sys\nGEOMETRY = json.loads({json.dumps(GEOMETRY)!r})\n" + FAKE)
    monkeypatch.setenv("FT_OVERLAY_WORKDIR", str(tmp_path / "work"))
    monkeypatch.setenv("FT_RESULTS_DEVICE", "testgpu")
    return tmp_path / "out"


def test_markdown_run_keeps_json_and_table(tmp_path, monkeypatch, capfd):
    out = _workdir(tmp_path, monkeypatch)
    assert series_bench.main(["--out", str(out), "--markdown", "--model", "all"]) == 0
    printed = capfd.readouterr().out
    assert "'--markdown'" in printed and "'--model', 'all'" in printed and "| model | n |" in printed
    doc = json.loads((out / "series_bench.json").read_text())
    assert doc["schema"] == MEASUREMENTS["series_bench"].schema and doc["benchmark_schema"].endswith("/2")
    assert doc["geometries"] == [GEOMETRY] and "provenance" in doc and doc["exit_code"] == 0
    md = (out / "series_bench.md").read_text().splitlines()
    assert md[0].startswith("<!-- series_bench.json of ") and "series " in md[0] and md[0].endswith(" -->")
    assert md[1:] == ["| model | n |"]


def test_without_markdown_no_table_file(tmp_path, monkeypatch, capfd):
    out = _workdir(tmp_path, monkeypatch)
    assert series_bench.main(["--out", str(out)]) == 0
    assert "'--markdown'" not in capfd.readouterr().out
    assert (out / "series_bench.json").is_file() and not (out / "series_bench.md").exists()


def test_geometries_read_typed_and_round_trip():
    doc = {"schema": MEASUREMENTS["series_bench"].schema, "benchmark_schema": "freetoken-bench-decode-gather/2",
           "args": {"model": "all"}, "geometries": [GEOMETRY, {"model": "glm4.7-nvfp4", "skipped": "not run", "rows": []}],
           "failures": []}  # fmt: skip
    m = SeriesBench.from_doc(doc)
    g = m.geometries[0]
    assert isinstance(g, SeriesGeometry) and g.auto["chose"] == "bpb8"
    assert g.rows[0].ratio == {"tma": Comparison(1.0037, aa_spread=0.002, verdict="faster")}  # the series' own verdict
    assert g.extra["banks"][0]["row_bytes"] == 8294400 and g.rows[0].extra == {"rounds": 5, "cut": False}
    assert m.geometries[1].skipped == "not run" and SeriesBench.from_doc(m.to_doc()) == m
    assert SeriesBench.from_doc({"rows": []}).to_doc() == {"rows": [], "args": {}, "failures": []}  # schema /1: as it was



def test_a_second_markdown_run_keeps_the_first_table_in_the_history(tmp_path, monkeypatch, capfd):
    """The table goes where its JSON goes: the writer moves the one it replaces to history/tree-<id>/."""
    out = _workdir(tmp_path, monkeypatch)
    assert series_bench.main(["--out", str(out), "--markdown"]) == 0
    first = (out / "series_bench.md").read_text()
    (out / "series_bench.md").write_text(first.replace(", tree ", ", tree " + "ab" * 6 + "x", 1))  # name a tree
    kept_text = (out / "series_bench.md").read_text()
    assert series_bench.main(["--out", str(out), "--markdown"]) == 0
    kept = list((out / "history").rglob("series_bench.*.md"))
    assert [p.relative_to(out).as_posix() for p in kept] == [f"history/tree-{'ab' * 6}/series_bench.1.md"]
    assert kept[0].read_text() == kept_text and (out / "series_bench.md").read_text() != kept_text
