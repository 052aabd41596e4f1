"""CPU checks of the report (``python -m report``) and of ``python -m report.compare``, no GPU.

The committed pages must be the rendering of the committed JSON; every verdict word must follow the
figures (synthetic documents are changed so that each verdict flips, and the words must flip too)."""

from __future__ import annotations

import re

import json
from pathlib import Path
from typing import Callable

import pytest

from suite import commands
from suite.models import BenchRun
from helpers import bench_store
from suite.stats import MARGIN, Comparison, verdict
from suite.results import REPO_ROOT
from freetoken_overlay.series import PATCHES_DIR, series_hash
from report import compare
from report.__main__ import main as report_main
from report.render import render

RESULTS = REPO_ROOT / "results"
BENCH = "bench.json"  # the benchmark's store (pytest-benchmark's JSON)


def _edit(root: Path, name: str, change: Callable[[dict], None]) -> None:
    """``change`` a synthetic document; the benchmark's store (``bench.json``) as its rows
    (:class:`BenchRun`'s ``to_doc``), saved back as a store."""
    path = root / "synthetic-gpu" / name
    doc = json.loads(path.read_text())
    if name == BENCH:
        doc = BenchRun.read(doc, name).to_doc()
    change(doc)
    path.write_text(json.dumps(bench_store(doc) if name == BENCH else doc))


def _row(doc: dict, layers: int, n: int) -> dict:
    return next(r for r in doc["gather"] if (r["layers"], r["n"]) == (layers, n))


def _compared(c: dict, ratio: float) -> dict:
    """A stored Comparison with another ratio and the verdict its rule gives it (as a writer stores it)."""
    return {**c, "ratio": ratio, "verdict": verdict(ratio, c["aa_spread"])}


def _set_ratio(doc: dict, layers: int, n: int, ratio: float) -> None:
    """A gather row's ratio (its comparison as the writer would store it, and its times)."""
    r = _row(doc, layers, n)
    r["ratio"]["tma"] = _compared(r["ratio"]["tma"], ratio)
    r["us"]["tma"] = r["us"]["upstream"] / ratio


FLIPS = {
    # name: (document, change, (page, text before), (page, text after))
    "gather row tie -> slower": (
        BENCH, lambda d: _set_ratio(d, 40, 1, 0.9),
        ("README.md", "| gather, 40 layers | 1 | 1.000 | ±0.004 | tie |"),
        ("README.md", "| gather, 40 layers | 1 | 0.900 | ±0.004 | slower |"),
    ),
    "headline verdict lists": (
        BENCH, lambda d: _set_ratio(d, 40, 0, 0.8),
        ("README.md", "per layer: faster at n = 0; tie at n = 1, 2, 4, 8, 600."),
        ("README.md", "per layer: tie at n = 1, 2, 4, 8, 600; slower at n = 0."),
    ),
    "parity target met -> not met": (
        BENCH, lambda d: _set_ratio(d, 40, 1, 0.9),
        ("REPORT.md", "- Ratio >= 1.00 at every n (other series `000000000000`): met."),
        ("REPORT.md", "- Ratio >= 1.00 at every n (other series `000000000000`): not met at n = 1 (0.900, slower)."),
    ),
    "small-n target not reached -> reached": (
        BENCH, lambda d: (_set_ratio(d, 40, 1, 1.1), _set_ratio(d, 40, 2, 1.06)),
        ("REPORT.md", "`000000000000`): 1.000 and 1.000, not reached."),
        ("REPORT.md", "`000000000000`): 1.100 and 1.060, reached."),
    ),
    "ideal target met -> not met": (
        BENCH, lambda d: d["ceiling"]["start"].update(gbps=d["ceiling"]["start"]["gbps"] * 2),  # ideal halves
        ("REPORT.md", "(tma / ideal; other series `000000000000`): met;"),
        ("REPORT.md", "(tma / ideal; other series `000000000000`): not met;"),
    ),
    "gather row within the margin -> beyond it": (
        BENCH, lambda d: _set_ratio(d, 40, 1, 1.006),  # its A/A spread ±0.004: the margin, 0.5%, decides
        ("README.md", "| gather, 40 layers | 1 | 1.000 | ±0.004 | tie |"),
        ("README.md", "| gather, 40 layers | 1 | 1.006 | ±0.004 | faster |"),
    ),
    "decode step tie -> faster": (
        BENCH, lambda d: d["decode_step"]["ratio"].update(tma=_compared(d["decode_step"]["ratio"]["tma"], 1.05)),
        ("README.md", "The captured decode step: tie in the benchmark run (1.007, within max(its A/A spread ±0.010, 0.5%))"),
        ("README.md", "The captured decode step: faster in the benchmark run (1.050, beyond max(its A/A spread ±0.010, 0.5%))"),
    ),
    "PDL gap lengthens -> shortens": (
        "step_pdl.json", lambda d: d["decode_step"]["breakdown"]["tma_pdl"]["mean_us"].update(gap_us=0.30),
        ("REPORT.md", "`000000000000`) lengthens the ensure -> copy gap from 0.41 to 0.67 µs per layer call: flashlib"),
        ("REPORT.md", "`000000000000`) shortens the ensure -> copy gap from 0.41 to 0.30 µs per layer call."),
    ),
    "per-layer PDL faster -> slower": (
        "step_pdl.json", lambda d: d["per_layer"]["0"]["ratio"].update(tma_pdl=0.5),
        ("REPORT.md", "tma with PDL against upstream: faster at n = 0; tie at n = 1, 2:"),
        ("REPORT.md", "tma with PDL against upstream: tie at n = 1, 2; slower at n = 0:"),
    ),
    "default ring below -> above the knee": (
        BENCH, lambda d: d.update(tma_default_ring=dict(ctas=64, stages=4, chunk_bytes=16384)),
        ("REPORT.md", "the default ring (16x4x8192, 384 KiB) sits below that point"),  # (4 - 1) x 8 KiB x 16 in flight
        ("REPORT.md", "the default ring (64x4x16384, 3 MiB) sits above that point"),  # (4 - 1) x 16 KiB x 64
    ),
    "conformance passed -> not passed": (
        "conformance/gpu.json", lambda d: d.update(passed=False),
        ("REPORT.md", "Passed (other series `000000000000`): 20 passed"),
        ("REPORT.md", "Not passed (other series `000000000000`): 20 passed"),
    ),
    "sanitizer passed -> not passed": (
        "conformance/sanitize.json", lambda d: d.update(passed=False),
        ("README.md", "| compute-sanitizer | – | – | – | passed |"),
        ("README.md", "| compute-sanitizer | – | – | – | not passed |"),
    ),
}  # fmt: skip


@pytest.mark.parametrize("name", list(FLIPS))
def test_every_verdict_word_follows_the_figures(synthetic_results, name):
    doc, change, (page0, before), (page1, after) = FLIPS[name]
    old = render(synthetic_results)
    assert before in old[page0], before
    assert after not in old[page1], after
    _edit(synthetic_results, doc, change)
    new = render(synthetic_results)
    assert after in new[page1], after
    assert before not in new[page0], before


def test_only_rows_that_exist_are_named(synthetic_results):
    """Without the n = 600 row and without the 16-layer graph the pages never mention them."""
    _edit(synthetic_results, BENCH, lambda d: d.update(gather=[r for r in d["gather"] if r["layers"] == 40]))
    pages = render(synthetic_results)
    assert "600" not in pages["REPORT.md"].split("## Targets")[1].split("## The proposal")[0]
    assert "16-layer" not in pages["REPORT.md"] and "4-layer" not in pages["REPORT.md"]
    assert "(40 layers at n = 0, 1, 2, 8)" in pages["REPORT.md"]


def test_decode_regime_rows_come_first_and_make_the_headline(synthetic_results):
    def add_decode(d: dict) -> None:
        decode = [{**r, "regime": "decode", "ratio": {"tma": _compared(r["ratio"]["tma"], 0.9)},
                   "us": {**r["us"], "tma": r["us"]["upstream"] / 0.9}} for r in d["gather"] if r["layers"] == 40]  # fmt: skip
        d["gather"] = d["gather"] + decode

    _edit(synthetic_results, BENCH, add_decode)
    pages = render(synthetic_results)
    rep = pages["REPORT.md"]
    assert "per layer (decode regime): slower at n = 0, 1, 2, 8." in pages["README.md"]
    assert rep.index("#### 40-layer graph, decode regime") < rep.index("#### 40-layer graph, replay regime")
    assert "| gather (decode), 40 layers | 1 | 0.900 |" in pages["README.md"]
    store = json.loads((synthetic_results / "synthetic-gpu" / BENCH).read_text())
    out = [r for r in compare.records(BenchRun.read(store, f"synthetic-gpu/{BENCH}"))]
    assert [r[0] for r in out].index("replay") > [r[0] for r in out].index("decode")


def test_report_renders_the_synthetic_tree(synthetic_results, tmp_path):
    pages = render(synthetic_results)
    assert set(pages) == {"README.md", "REPORT.md", "PR-1.md", "PR-2.md"}
    readme, rep, pr = pages["README.md"], pages["REPORT.md"], pages["PR-1.md"]
    assert "| Synthetic GPU (dry run) | gather, 40 layers | 1 |" in readme
    assert rep.index("**Verdict.**") < rep.index("## Synthetic GPU")
    assert commands.series_bench_line() in pages["PR-2.md"]
    for page in ("PR-1.md", "PR-2.md"):  # pasted upstream: no overlay path, a page a maintainer reads
        assert not re.search(r"(?<![\w])bench/", pages[page]), f"{page} names overlay paths"
        assert len(pages[page].split()) <= 400, f"{page}: a pull-request text of at most 400 words"
    assert "**faster**" not in rep + pr + readme, "verdicts are words, not claims in bold"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "No results yet" in render(empty)["REPORT.md"]


def test_a_device_the_series_benchmark_alone_measured_has_its_verdict_and_its_series(tmp_path):
    """A device with only a run of the series' benchmark (a committed one with auto's start-up probe, copied): its
    verdict is that benchmark's, not "no benchmark yet", labelled with its series; PR-2, whose auto has no probe,
    cites none of it."""
    src = next(p for p in sorted(RESULTS.glob("*/series_bench.json")) if '"probe_ms"' in p.read_text())
    doc = json.loads(src.read_text())
    name, lone = doc["machine"]["device_name"], tmp_path / "results" / "lone-gpu"
    lone.mkdir(parents=True)
    (lone / "series_bench.json").write_text(src.read_text())
    pages = render(tmp_path / "results")
    assert f"{name}: no benchmark yet" not in pages["README.md"]
    series = doc["provenance"]["series_hash"]
    verdict_line = f"**Verdict.** On {name} (other series `{series}`), the series' benchmark over {len(doc['geometries'])}"
    assert verdict_line in pages["REPORT.md"] and "start-up probe" in pages["REPORT.md"]
    assert "- **Measured**: not yet;" in pages["PR-2.md"] and series not in pages["PR-2.md"]


def test_the_vocabulary_is_stated_once_on_the_entry_page():
    pages = render(RESULTS)
    definition = "It is called *faster*, *tie* or *slower* against the A/A spread of its own run"
    assert pages["README.md"].count(definition) == 1
    assert definition not in pages["REPORT.md"] and "[README.md](README.md)" in pages["REPORT.md"]
    assert re.search(r"upstream / tma [\w ]*\(> 1: tma faster\)", pages["PR-1.md"])  # pasted upstream: its own direction
    rep = pages["REPORT.md"]
    own = rep.split("<details>")[0] + rep.split("</details>")[-1]  # not the pasted comment
    assert "a tie" not in pages["README.md"] + own


def _patches_the_pages_name(tmp_path: Path) -> Path:
    """patches/ of the series the committed pages were rendered for (README.md names it): the checkout's, or the
    last commit's of this repository's history that held it (a contributor's new commit leaves the pages as they
    were until ``nox -s report``); the checkout's where the history lacks it (a shallow clone)."""
    import subprocess

    named = re.search(r"not the one in patches/, `([0-9a-f]{12})`", (RESULTS / "README.md").read_text())
    if not named or named[1] == series_hash():
        return PATCHES_DIR
    git = ["git", "-C", str(REPO_ROOT)]
    commits = subprocess.run([*git, "log", "--format=%H", "--", "patches"], capture_output=True, text=True).stdout
    for sha in commits.split():
        out = tmp_path / sha
        out.mkdir()
        tar = subprocess.run([*git, "archive", sha, "patches"], capture_output=True, check=True).stdout
        subprocess.run(["tar", "-x", "-C", str(out)], input=tar, check=True)
        if series_hash(out / "patches") == named[1]:
            return out / "patches"
    return PATCHES_DIR


def test_committed_pages_are_the_rendering_of_the_committed_json(tmp_path):
    """``nox -s report`` has been run after the last change to the JSON or the templates: the pages are the rendering
    of the committed JSON and the series they name (a contributor's new commit, exported, fails nothing here)."""
    patches = _patches_the_pages_name(tmp_path)
    assert report_main(["--results", str(RESULTS), "--patches", str(patches), "--check"]) == 0


def _committed_benchmark() -> dict:
    """The committed H200 benchmark as the views read it (pytest-benchmark's store, suite.models.BenchRun)."""
    return BenchRun.load("h200", RESULTS)


def test_committed_figures_equal_the_json():
    bench = _committed_benchmark()
    readme = (RESULTS / "README.md").read_text()
    rep = (RESULTS / "REPORT.md").read_text()
    for row in bench.gather:
        c = row.ratio["tma"]
        assert f"| {c.ratio:.3f} | ±{c.aa_spread:.3f} | {c.verdict} |" in rep
    c = bench.decode_step.ratio["tma"]
    side = "within" if abs(c.ratio - 1) <= max(c.aa_spread, MARGIN) else "beyond"
    assert f"({c.ratio:.3f}, {side} max(its A/A spread ±{c.aa_spread:.3f}, {MARGIN:.1%}))" in readme
    sass = json.loads((RESULTS / "sass.json").read_text())
    for r in sass["reports"]:
        regs = "/".join(sorted({str(f["registers"]) for f in r["functions"] if "decode_gather_kernel" in f["name"]}))
        assert f"| {r['arch']} | {regs} | {r['max_stack_frame_bytes']} |" in rep


def test_compare_prints_upstream_and_ours_per_regime_layers_n(capsys):
    assert compare.main(["--results", str(RESULTS)]) == 0
    out = capsys.readouterr().out
    bench = _committed_benchmark()
    assert out.startswith(f"{bench.machine['device_name']} (") and "h200/bench.json, series" in out.splitlines()[0]
    lines = [line.split() for line in out.splitlines() if line.startswith(("decode ", "replay ")) and "step" not in line]
    keys = [(x[0] != "decode", int(x[1]), int(x[2])) for x in lines]
    assert keys == sorted(keys) and len(keys) == len(bench.gather)
    for x in lines:
        row = next(r for r in bench.gather if (r.regime, r.layers, r.n) == (x[0], int(x[1]), int(x[2])))
        c = row.ratio["tma"]
        assert x[6] == f"{c.ratio:.3f}" and x[7] == f"±{c.aa_spread:.3f}" and x[8] == c.verdict
    assert compare.main(["--results", str(RESULTS), "--csv"]) == 0
    csv_lines = capsys.readouterr().out.splitlines()
    assert csv_lines[0].startswith("device,regime,layers,n,") and len(csv_lines) == len(bench.gather) + 2
    assert compare.main(["--results", str(RESULTS), "--device", "h200x2"]) == 1


def test_sweep_dry_run(tmp_path):
    from bench import sweep

    assert sweep.main(["--dry-run", "--out", str(tmp_path), "--quick"]) == 0
    doc = json.loads((tmp_path / "sweep.json").read_text())
    assert doc["synthetic"] and doc["ring"] and doc["summary"]["copy_engine_gbps"]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert doc["png"] is None
    else:
        assert (tmp_path / "sweep.png").stat().st_size > 10_000


def test_end_to_end_ratio_is_settled_only_outside_the_repeats_range():
    from report.words import settled

    def c(ratio, noise, lo=None, hi=None):  # the per-repeat ratios' range: lo-hi about the ratio, one side of 1
        lo, hi = lo or (ratio and ratio - 0.001), hi or (ratio and ratio + 0.001)
        return Comparison(ratio, paired_min=lo, paired_max=hi, repeat_range=noise, rule="repeats")

    assert settled(c(1.19, 0.41)) == "does not stand out of"
    assert settled(c(1.19, 0.05)) == "stands out of"
    assert settled(c(0.80, 0.05)) == "stands out of"
    assert settled(c(1.004, 0.001)) == "does not stand out of"  # within the margin, 0.5%
    assert settled(c(1.19, 0.05, 0.98, 1.3)) == "does not stand out of"  # repeats on both sides of 1
    assert settled(c(1.1, None)) == "does not stand out of" and settled(Comparison(rule="repeats")) == "n/a"


@pytest.mark.integration
def test_series_footprint_is_the_net_diff_git_reports(tmp_path: Path) -> None:
    """A later patch editing a file an earlier one added: the footprint is the series' net diff
    (``git diff --numstat base..tip``), not the sum of the patches' lines; signatures are no lines."""
    import subprocess

    from report.series import series_footprint

    repo = tmp_path / "repo"
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t",
           "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"}  # fmt: skip

    def git(*args: str) -> str:
        return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True).stdout

    repo.mkdir()
    git("init", "-q")
    (repo / "old.py").write_text("".join(f"line {i}\n" for i in range(10)))
    git("add", "-A"); git("commit", "-qm", "base")  # fmt: skip
    (repo / "new.py").write_text("".join(f"new {i}\n" for i in range(8)))
    (repo / "old.py").write_text("".join(f"line {i}\n" for i in range(10)) + "added\n")
    git("add", "-A"); git("commit", "-qm", "one")  # fmt: skip
    (repo / "new.py").write_text("".join(f"new {i}\n" for i in range(8) if i != 3) + "new 8\nnew 9\n")
    git("add", "-A"); git("commit", "-qm", "two")  # fmt: skip
    out = tmp_path / "patches"
    git("format-patch", "-q", "-o", str(out), "HEAD~2")
    numstat = {line.split("\t")[2]: (int(line.split("\t")[0]), int(line.split("\t")[1]))
               for line in git("diff", "--numstat", "HEAD~2", "HEAD").splitlines()}  # fmt: skip
    fp = series_footprint(out)
    assert {f["path"]: (f["added"], f["removed"]) for f in fp["existing"] + fp["new"]} == numstat
    assert (fp["added"], fp["removed"]) == tuple(map(sum, zip(*numstat.values())))


def test_auto_of_today_and_of_older_series_both_render(synthetic_results: Path) -> None:
    """auto reads ft bench bw's pick now (its runs record ``pick``, the decode step's choice its INFO ``line``); the
    committed documents of older series timed a start-up probe (``choice``, ``reason``): both render, each as itself."""
    line = "decode gather auto: runs tma 8x3x16384, ft bench bw's pick (0.990x fast_index_copy_multi's time; A/A 0.002)"
    runs = [{"pick": {"label": "tma 8x3x16384", "line": line, "entry": {}}, "captured": 0, "timed": 0}] * 2
    summary = {"runs": 2, "chosen": ["tma 8x3x16384"] * 2, "counts": {"tma 8x3x16384": 2}, "same_every_time": True,
               "followed_profile": True, "captured_or_timed": 0, "auto_ms_max": 12.3, "unset_ms_max": 11.0}  # fmt: skip
    doc = {"schema": commands.MEASUREMENTS["auto_stability"].schema, "provenance": {"series_hash": "1" * 12},
           "settings": {}, "summary": summary, "runs": runs, "errors": []}  # fmt: skip
    (synthetic_results / "synthetic-gpu" / "auto_stability.json").write_text(json.dumps(doc))

    rep = render(synthetic_results)["REPORT.md"]
    assert "| 2 | tma 8x3x16384 x2 | yes | yes | 0 | 12 / 11 | `111111111111` |" in rep and f"- `{line}`" in rep
    from types import SimpleNamespace

    from report.gather import decode_step_view
    from suite.models.bench import StepRow

    c = Comparison(1.0, aa_spread=0.01)
    for choice, said in (({"label": "x", "line": line}, line), ({"label": "bpb8", "reason": "kept"}, "kept")):
        step = StepRow(layers=40, ratio={"tma": c, "auto": c}, auto_choice=choice)
        assert decode_step_view(SimpleNamespace(decode_step=step, store="s"))["auto"]["reason"] == said
    committed = (RESULTS / "REPORT.md").read_text()  # the committed run of a series whose auto timed a probe
    assert "whose start-up probe (this series' `auto`) runs once" in committed and "probe ms (min / median / max)" in committed


def _in_process_e2e(machine: dict, aa_tps: float) -> dict:
    """An end-to-end document of the in-process A/B (the rule ``aa``) as its writer makes it: 10 rounds, tma 2 %
    faster, round 1's A/A control at ``aa_tps`` (upstream at 100 tok/s)."""
    import argparse

    from bench.e2e import harness
    from suite.models import E2E
    from suite.results import document

    tps = {"upstream": 100.0, "tma": 102.0, "upstream_aa": 100.0}
    runs = [{"repeat": r, "point": 0, "kernel": k, "tokens_per_s": aa_tps if (r, k) == (1, "upstream_aa") else v,
             "ids_sha256": "a" * 64, "misses_total": 100, "miss_rate": 0.1, "misses_per_token": 9.5, "ttft_s": 0.1}
            for r in range(10) for k, v in tps.items()]  # fmt: skip
    args = argparse.Namespace(tokens=512, skip=128, repeats=10, kv_tokens=8192, fresh_processes=False)
    model = {"name": "ft-e2e", "architecture": "Qwen3_5MoeForCausalLM", "num_hidden_layers": 12, "num_experts": 256,
             "synthetic": {"spec": {}}}  # fmt: skip
    _, fields = harness.document_fields(args, model, [{"slots": 864}], runs, True, [], 0)
    return E2E.from_doc({**document("e2e", machine=machine), **fields}).to_doc()  # as entry.save writes it


def test_an_in_process_e2e_renders_the_aa_verdict_against_its_aa_spread(synthetic_results):
    d = synthetic_results / "synthetic-gpu"
    machine = json.loads((d / "step_pdl.json").read_text())["machine"]
    (d / "e2e.json").write_text(json.dumps(_in_process_e2e(machine, 100.0)))
    pages = render(synthetic_results)
    rep = pages["REPORT.md"]
    assert "one process, 10 rounds of `upstream`, `tma` and `upstream_aa` (the A/A control)" in rep
    assert "A/A spread (largest per-round upstream / A/A - 1)" in rep
    assert "the ratio 1.020 stands out of max(0.5%, the A/A spread (0.000: upstream against itself" in rep
    assert "12-layer synthetic model, 10 rounds in one process" in pages["PR-1.md"]
    assert "1.020 at 0.10 misses/lookup, faster (A/A ±0.000)" in pages["PR-1.md"]
    (d / "e2e.json").write_text(json.dumps(_in_process_e2e(machine, 100.0 * 1.03)))  # one round's A/A 3 % off
    pages = render(synthetic_results)
    assert "the ratio 1.020 does not stand out of max(0.5%, the A/A spread (0.030:" in pages["REPORT.md"]
    assert "1.020 at 0.10 misses/lookup, a tie (A/A ±0.030)" in pages["PR-1.md"]


def test_pr1_shows_the_newest_e2e_run_naming_its_device(synthetic_results):
    """Of the devices with an end-to-end run, PR-1 gives the one measured last, named, not the first measured device's."""
    d = synthetic_results / "synthetic-gpu"
    machine = json.loads((d / "step_pdl.json").read_text())["machine"]
    older = _in_process_e2e(machine, 100.0)
    other = synthetic_results / "other-gpu"
    other.mkdir()
    newer = _in_process_e2e({**machine, "device_name": "Other GPU"}, 100.0 * 1.03)
    for doc, when in ((older, "2026-01-01T00:00:00+00:00"), (newer, "2026-02-01T00:00:00+00:00")):
        doc["generated_at"] = when
    (d / "e2e.json").write_text(json.dumps(older))
    (other / "e2e.json").write_text(json.dumps(newer))
    line = next(x for x in render(synthetic_results)["PR-1.md"].splitlines() if "**End to end**" in x)
    assert line.startswith("- **End to end** on Other GPU:") and "a tie (A/A ±0.030)" in line


def test_pr2_states_the_pick_of_a_committed_ft_bench_bw_profile(synthetic_results: Path) -> None:
    """A device's benchbw.json (the profile ft bench bw wrote): PR-2 gives each decode_gather entry's pick, ratios and
    A/A spread, labelled with the series of the freetoken version that wrote it; without one it says not yet."""
    assert "**Measured**: not yet" in render(synthetic_results)["PR-2.md"]
    entry = {"format": "nvfp4", "row_bytes": [4096, 8192], "pick": "tma 16x4x8192", "aa_spread": 0.007, "rounds": 10,
             "ratio": {"tma 8x3x16384": 1.0182, "tma 16x4x8192": 1.0188}, "verified_copies": 10752,
             "freetoken": "0.2.1+dg.abcdefabcdef"}  # fmt: skip
    profile = {"version": 6, "decode_gather": {"version": 1, "entries": {"nvfp4:4096,8192": entry}}}
    (synthetic_results / "synthetic-gpu" / "benchbw.json").write_text(json.dumps(profile))
    page = render(synthetic_results)["PR-2.md"]
    assert ("(other series `abcdefabcdef`), nvfp4 rows of 2 banks: picked `tma 16x4x8192`; upstream / ring "
            "tma 8x3x16384 1.018, tma 16x4x8192 1.019; A/A ±0.007, 10 rounds, 10,752 copies checked.") in page
    assert "**Measured**: not yet" not in page


def test_a_changed_figure_fails_the_check(synthetic_results: Path, tmp_path: Path, capsys) -> None:
    """A page is stale when the JSON changes under it, as when the series does."""
    check = ["--results", str(synthetic_results), "--out", str(tmp_path / "pages"), "--check"]
    assert report_main(check[:-1]) == 0 and report_main(check) == 0
    _edit(synthetic_results, BENCH, lambda d: _set_ratio(d, 40, 1, 0.9))
    capsys.readouterr()
    assert report_main(check) == 1
    assert f"{tmp_path / 'pages' / 'README.md'} does not describe the JSON" in capsys.readouterr().err
