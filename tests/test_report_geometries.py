"""CPU checks of the report's views of a ``--model`` run of the series' benchmark (report.geometries): the
one table over every geometry, the lines the pull-request texts compute from it, the ring sweep's
conclusion by today's rule, what ``auto`` ran (a start-up probe of older series, ``ft bench bw``'s pick since) and
which tree each run is of. Synthetic documents are
changed so that each line must change with them."""

from __future__ import annotations

import json
from pathlib import Path

from bench import series_bench
from suite.results import REPO_ROOT
from report.render import render
from suite.stats import MARGIN, verdict

RESULTS = REPO_ROOT / "results"
SLUG = "synthetic-gpu"
AT = "2026-01-02T00:00:00+00:00"


def _row(n: int, up: float, ratio: float, aa_spread: float) -> dict:
    """A row as the series' benchmark writes it: its ratios, and the verdicts its own rule gave them."""
    med = {"upstream": up, "upstream_aa": up, "tma": up / ratio, "tma_8x4x8192": up / ratio}
    return {"n": n, "regime": "decode", "median_us": med, "aa_spread": aa_spread, "verified": 300,
            "ratio": {"tma": ratio, "tma_8x4x8192": ratio}, "verdict": {k: verdict(ratio, aa_spread) for k in ("tma", "tma_8x4x8192")},
            "gbps": {"upstream": 40.0 if n else None}}  # fmt: skip


def _set_tma(row: dict, ratio: float) -> None:
    row["ratio"]["tma"], row["verdict"]["tma"] = ratio, verdict(ratio, row["aa_spread"])


def _auto(chose: str = "bpb8", tma: float = 1.011) -> dict:
    """auto of a series that timed a start-up probe, as the benchmark recorded it per geometry (in today's names)."""
    return {"chose": chose, "default": "bpb8", "ratio": {"bpb32": 1.003, "tma 16x4x8192": tma}, "threshold": 1.02,
            "probe_ms": 300.0, "load_ms": 1.0, "line": f"decode gather auto: runs {chose}"}  # fmt: skip


def geometries_doc(tree: str | None = None) -> dict:
    """A synthetic ``--model`` run: two geometries, n = 0 and 1, tma a tie at n = 0 and faster at n = 1."""
    geos = [{"model": "alpha-1B", "quant_format": "nvfp4", "expert_bytes": 2_000_000, "skipped": None, "auto": _auto(),
             "rows": [_row(0, 2.0, 1.0, 0.02), _row(1, 40.0, 1.01, 0.002)]},
            {"model": "beta-2B", "quant_format": "bf16", "expert_bytes": 6_000_000, "skipped": None, "auto": _auto(),
             "rows": [_row(0, 2.2, 0.99, 0.03), _row(1, 120.0, 1.005, 0.001)]},
            {"model": "gamma-3B", "quant_format": "mxfp4_triton", "expert_bytes": 13_000_000,
             "skipped": "needs 90 GiB of host memory", "rows": []}]  # fmt: skip
    choice = {"default": "16x4x8192", "best": None,
              "scores": {"8x4x8192": {"geomean": 1.001, "rows": 2, "wins": 0, "losses": 0}}}  # fmt: skip
    return {"schema": "freetoken-decode-gather-series-bench/1", "benchmark_schema": "freetoken-bench-decode-gather/2",
            "synthetic": True, "generated_at": AT, "provenance": {"series_hash": "000000000000", "tree": tree},
            "args": {"model": "all", "rounds": 5, "replays": 10, "blocks_per_bank": []}, "decides": "decode",
            "rows": [], "geometries": geos, "failures": [], "tma_ring": "16x4x8192",
            "verified": {"replays": 1234, "copies": 29616}, "ring_choice": choice}  # fmt: skip


def _write(root: Path, doc: dict) -> None:
    (root / SLUG / "series_bench.json").write_text(json.dumps(doc))


def _pages(root: Path, change=None) -> dict[str, str]:
    doc = geometries_doc()
    if change:
        change(doc)
    _write(root, doc)
    return render(root)


def test_one_table_over_every_geometry(synthetic_results):
    rep = _pages(synthetic_results)["REPORT.md"]
    assert "The series' benchmark over 3 model geometries (`benchmarks/bench_decode_gather.py --model all`)" in rep
    assert "| alpha-1B | nvfp4 | 2.00 | 0 | 2.00 | – | 1.000 | ±0.020 | tie | bpb8 |" in rep
    assert "| alpha-1B | nvfp4 | 2.00 | 1 | 40.00 | 40.0 | 1.010 | ±0.002 | faster | bpb8 |" in rep
    assert "| beta-2B | bf16 | 6.00 | 1 | 120.00 | 40.0 | 1.005 | ±0.001 | tie | bpb8 | `000000000000` |" in rep  # margin
    assert "at n = 0 tie in 2 of 2; at n = 1 faster in 1, tie in 1 of 2." in rep
    assert "Not measured: gamma-3B (needs 90 GiB of host memory)." in rep
    assert "Verified: 1,234 timed graph replays (29,616 `copy_missing` calls)" in rep and ": 0 wrong (other series `000000000000`)." in rep
    assert "leave `FREETOKEN_DECODE_GATHER_RING` unset." in rep  # the rows' ring, as fast as tma; not the stored 1.001
    assert "8x4x8192 1.000 (faster beyond max(A/A, 0.5%) in 0 of 2" in rep


def test_the_pr_lines_follow_the_figures(synthetic_results):
    pages = _pages(synthetic_results)
    assert "tma is never slower beyond max(A/A, 0.5%) in 4 rows:" in pages["PR-1.md"]
    assert "kept its default `bpb8` (upstream's kernel) on 2 of 2 geometries;" in pages["REPORT.md"]
    best = "tma 16x4x8192 on alpha-1B, ran 1.011x as fast as its default, under that probe's threshold of 1.020x"
    assert best in pages["REPORT.md"] and "- **Measured**: not yet;" in pages["PR-2.md"]  # a probe is not auto now

    def slower(doc):
        _set_tma(doc["geometries"][1]["rows"][1], 0.99)  # beta-2B n = 1: beyond its A/A ±0.001

    def chose(doc):
        doc["geometries"][1]["auto"] = _auto("tma 16x4x8192", 1.05)
        doc["ring_choice"]["best"] = "8x4x8192"

    pr1 = _pages(synthetic_results, slower)["PR-1.md"]
    assert "tma is slower beyond max(A/A, 0.5%) in 1 of 4 rows, at n = 1 (worst 0.990 ±0.001):" in pr1
    assert "never slower" not in pr1 and "| beta-2B | 0.990 ±0.001 | `000000000000` |" in pr1  # figure, A/A, series
    pages = _pages(synthetic_results, chose)
    assert "on 1 of 2 geometries; it chose `tma 16x4x8192` on beta-2B;" in pages["REPORT.md"]
    assert "tma 16x4x8192 on beta-2B, ran 1.050x as fast as its default, at or over" in pages["REPORT.md"]
    assert "`export FREETOKEN_DECODE_GATHER_RING=8x4x8192`" not in pages["REPORT.md"]  # the rows' ring is no faster

    def picked(doc):  # auto of today: ft bench bw's pick, read as the cache was built (chose and its INFO line only)
        for g, k in zip(doc["geometries"], ("tma 8x3x16384", "fast_index_copy_multi (blocks_per_bank=8)")):
            g["auto"] = {"chose": k, "line": f"decode gather auto: runs {k}, ft bench bw's pick"}

    pr2 = _pages(synthetic_results, picked)["PR-2.md"]
    assert ("- **Measured** on Synthetic GPU (dry run): `FREETOKEN_DECODE_GATHER=auto` ran `tma 8x3x16384` on alpha-1B, "
            "`fast_index_copy_multi (blocks_per_bank=8)` on beta-2B (other series `") in pr2 and "Measured**: not yet" not in pr2
    for page in ("PR-1.md", "PR-2.md"):
        assert len(pages[page].split()) <= 400


def test_a_run_of_schema_3_gives_its_rings_and_auto_by_figures(synthetic_results):
    """Benchmark schema /3 records no ring choice (its writer stores one from the rows; the page decides it from the
    rows by today's rule either way, whatever is stored) and auto's figures as numbers (the page reads them, not the
    INFO line)."""

    def v3(doc):
        doc["benchmark_schema"] = "freetoken-bench-decode-gather/3"
        del doc["ring_choice"]
        for g in doc["geometries"][:2]:
            g["auto"] = {"chose": "bpb8", "default": "bpb8", "ratio": {"bpb32": 1.003, "tma 16x4x8192": 1.04},
                         "threshold": 1.05, "line": "decode gather auto: a line without figures"}  # fmt: skip
            for r in g["rows"]:
                r["median_us"]["tma_8x4x8192"] = r["median_us"]["tma"] / 1.05

    def written(doc):
        v3(doc)
        doc["ring_choice"] = series_bench.fields_of(doc)["ring_choice"]  # what the writer stores

    def stale(doc):  # a choice stored by an older rule: the page says what the rows say now
        written(doc)
        doc["ring_choice"]["scores"]["8x4x8192"].update(wins=0, losses=2)

    for change in (v3, written, stale):
        rep = _pages(synthetic_results, change)["REPORT.md"]
        assert "8x4x8192 1.050 (faster beyond max(A/A, 0.5%) in 2 of 2 rows, slower in 0)" in rep
        assert "`export FREETOKEN_DECODE_GATHER_RING=8x4x8192`" in rep
    best = "tma 16x4x8192 on alpha-1B, ran 1.040x as fast as its default, under that probe's threshold of 1.050x"
    assert best in rep


def test_a_run_of_before_model_geometries_has_no_section(synthetic_results):
    """A run of before ``--model`` (the benchmark's schema /1, one geometry's rows: history only) is not tabled."""
    assert "The series' benchmark" not in render(synthetic_results)["REPORT.md"]


def test_earlier_runs_of_the_same_tree_are_tabled_with_their_verdicts(synthetic_results):
    from suite import results
    from report.model import models_of
    from report.repeats import current_ratios, repeats_view
    from report.views import series_bench_view

    tree = "t" * 40
    _write(synthetic_results, geometries_doc(tree))
    runs = synthetic_results / SLUG / "history" / f"tree-{'t' * 12}"  # kept by its writer, by tree
    runs.mkdir(parents=True)
    earlier = geometries_doc(tree)
    earlier["generated_at"] = "2026-01-01T00:00:00+00:00"
    _set_tma(earlier["geometries"][0]["rows"][1], 0.98)  # alpha-1B n = 1 slower beyond the A/A aa_spread 0.002
    (runs / "series_bench.1.json").write_text(json.dumps(earlier))
    other = json.loads(json.dumps(earlier))
    other["provenance"]["tree"] = "u" * 40  # another tree: not a repeat
    (runs / "series_bench.2.json").write_text(json.dumps(other))  # misfiled: the provenance decides
    docs = models_of(results.load_device(SLUG, synthetic_results))
    now = current_ratios(None, series_bench_view(docs["series_bench"]))
    reps = repeats_view(synthetic_results, SLUG, docs, now)
    assert [r["kind"] for r in reps] == ["series_bench"]
    assert [run["file"] for run in reps[0]["runs"]] == [f"{SLUG}/series_bench.json", f"{SLUG}/history/tree-{'t' * 12}/series_bench.1.json"]
    assert reps[0]["runs"][1]["ratios"][1].verdict == "slower" and reps[0]["runs"][0]["ratios"][1].verdict == "faster"
    _set_tma(earlier["geometries"][0]["rows"][1], 1.01)  # the repeat agrees
    (runs / "series_bench.1.json").write_text(json.dumps(earlier))
    assert repeats_view(synthetic_results, SLUG, docs, now)[0]["runs"][1]["ratios"][1].verdict == "faster"


def test_a_model_run_is_compared_only_with_model_runs_of_its_tree(synthetic_results):
    tree = "t" * 40
    _write(synthetic_results, geometries_doc(tree))
    runs = synthetic_results / SLUG / "history" / f"tree-{'t' * 12}"
    runs.mkdir(parents=True)
    earlier = geometries_doc(tree)
    earlier["generated_at"] = "2026-01-01T00:00:00+00:00"
    _set_tma(earlier["geometries"][0]["rows"][1], 0.99)  # alpha-1B n = 1 slower in the earlier run
    (runs / "series_bench.1.json").write_text(json.dumps(earlier))
    rows_run = json.loads((RESULTS / "h200" / "history" / "tree-cea31ee84447" / "series_bench.1.json").read_text())
    rows_run["provenance"]["tree"] = tree  # the same tree, the format of before --model: not compared
    (runs / "series_bench.2.json").write_text(json.dumps(rows_run))
    rep = render(synthetic_results)["REPORT.md"]
    section = rep.split("The same tree measured again")[1].split("\n### ")[0]
    assert "The series' benchmark (alpha-1B, its first geometry):" in section
    assert "series_bench.1.json" in section and "series_bench.2.json" not in section
    assert "| 0.990 (slower) |" in section


def test_committed_geometry_table_equals_the_json():
    doc = json.loads((RESULTS / "h200" / "series_bench.json").read_text())
    rep = (RESULTS / "REPORT.md").read_text()
    for g in doc["geometries"]:
        for r in g["rows"]:
            ratio, aa_spread = r["ratio"]["tma"], r["aa_spread"]
            word = "tie" if abs(ratio - 1) <= max(aa_spread, MARGIN) else "faster" if ratio > 1 else "slower"
            assert (f"| {g['model']} | {g['quant_format']} | {g['expert_bytes'] / 1e6:.2f} | {r['n']} | "
                    f"{r['median_us']['upstream']:,.2f} |") in rep
            assert f"| {ratio:.3f} | ±{aa_spread:.3f} | {word} | {g['auto']['chose']} |" in rep


def test_each_further_ring_gets_its_own_verdicts_against_upstream():
    """A run that timed a ring besides tma (``--rings``) says of it what it says of tma: slower rows, their n."""
    from report.geometries import geometries_view
    from suite.models import SeriesBench

    doc = geometries_doc()
    row = doc["geometries"][1]["rows"][1]
    row["ratio"]["tma_8x4x8192"], row["verdict"]["tma_8x4x8192"] = 0.98, "slower"
    view = geometries_view(SeriesBench.from_doc(doc))
    ring = view["by_ring"]["8x4x8192"]
    assert (len(ring["slower"]), ring["slower_ns"], ring["rows_total"]) == (1, [1], 4)
    assert ring["slower"][0]["model"] == "beta-2B" and not view["slower"]  # tma itself is unchanged


def test_pr1_tables_the_newest_series_benchmark_and_lists_the_others(synthetic_results):
    """PR-1's table is the series benchmark measured last, on whichever device; each other device gets an "Also" line."""
    _write(synthetic_results, geometries_doc())
    (synthetic_results / "other-gpu").mkdir()
    (synthetic_results / "other-gpu" / "series_bench.json").write_text(json.dumps({**geometries_doc(), "generated_at": "2026-02-01T00:00:00+00:00"}))
    lines = render(synthetic_results)["PR-1.md"].splitlines()
    assert [x[:28] for x in lines if x.startswith(("- **Measured** on ", "- **Also** on "))] == [
        "- **Measured** on other-gpu ", "- **Also** on Synthetic GPU "]
