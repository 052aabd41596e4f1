"""CPU checks of what experiments/ keeps: the probe page rendered from the committed probe files
(``python -m experiments.report``), their labels in the switch's words, no machine paths in them."""

from __future__ import annotations

import pytest

from suite.results import REPO_ROOT


def test_interleaved_touch_probe_rows_and_the_share_a_touch_takes_back(tmp_path):
    """An interleaved probe file becomes one row per regime and n (ratios against upstream@decode, the A/A of
    upstream_aa@decode), and each kernel's fresh-row cost and the share each touch takes back are worked out
    from the rounds' medians: hand-computed here for a 40/38/39 µs decode/replay/touched kernel."""
    from suite.results import write_json
    from experiments.report import regime_probe_view

    rounds = {"upstream@decode": [40.0, 40.2, 39.8], "upstream_aa@decode": [40.1, 40.0, 39.9], "upstream@replay": [38.0] * 3,
              "upstream@decode_touch2M": [39.0] * 3, "tma@decode": [41.0] * 3, "tma@replay": [40.0] * 3,
              "tma@decode_touch2M": [40.5] * 3}  # fmt: skip
    from suite.stats import paired_rounds

    base, aa = rounds["upstream@decode"], rounds["upstream_aa@decode"]
    summ = {k: paired_rounds(base, v, aa).to_doc() for k, v in rounds.items() if k != "upstream_aa@decode"}
    iv = {"regimes": ["decode", "replay", "decode_touch2M"], "kernels": ["upstream", "upstream_aa", "tma"], "rounds_us": rounds, "summary": summ}
    write_json(tmp_path / "dev" / "probes" / "probe_touchi-x.json",
               {"schema": "probe/1", "footprint": {}, "per_n": {"1": {"interleaved": iv}}})  # fmt: skip
    view = regime_probe_view(tmp_path, "dev")["runs"][0]
    assert view["interleaved"] and view["rounds"] == "3" and view["variants"] == ["upstream", "tma"]
    assert [r["regime"] for r in view["rows"]] == ["decode", "replay", "decode_touch2M"]
    replay = view["rows"][1]
    assert replay["aa_spread"] == pytest.approx(0.005, abs=1e-6)  # 40.2 / 40.0
    assert replay["cells"][0]["ratio"] == pytest.approx(40.0 / 38.0) and replay["cells"][0]["verdict"] == "faster"
    upstream, tma = view["recovered"]
    assert upstream["kernel"] == "upstream" and upstream["gap_us"] == pytest.approx(2.0) and upstream["shares"]["decode_touch2M"] == pytest.approx(0.5)
    assert tma["gap_us"] == pytest.approx(1.0) and tma["shares"]["decode_touch2M"] == pytest.approx(0.5)
    page = __import__("experiments.report", fromlist=["render"]).render(tmp_path)
    assert "| replay | 1 | ±0.005 | 1.053 (faster) | 1.000 (tie) |" in page  # upstream 40/38, tma 40/40 against upstream@decode
    assert "- n = 1, `upstream`: 2.00 µs; `decode_touch2M` 50%." in page


def test_committed_probe_files_name_their_kernels_in_the_switchs_words():
    """Every label of the committed probe files is the switch's (upstream, upstream_aa, upstream_bpb32,
    upstream_<load>, tma, ...), suffixes (@regime, |neighbour) after it: none of the words of before it."""
    from experiments.report import ROOT, probe_run
    from suite.results import read_json

    old = {"up", "upAA", "up32", "unset", "unsetAA", "unset_aa", "ours"} | {f"up_{x}" for x in ("nc", "nc_l2_128", "nc_l2_256")}

    def labels(v):
        if isinstance(v, dict):
            return {k for k in v if isinstance(k, str)} | {w for x in v.values() for w in labels(x)}
        if isinstance(v, list):
            return {w for x in v for w in labels(x)}
        return {v} if isinstance(v, str) else set()

    files = sorted(ROOT.rglob("*.json"))
    assert len(files) > 40
    for path in files:
        kernels = {w.split("@")[0].split("|")[0] for w in labels(read_json(path))}
        assert not old & kernels, f"{path}: {sorted(old & kernels)}"
    folder = ROOT / "h200" / "tree-cea31ee84447"
    iv = read_json(folder / "probe_touchi-hostbank.json")["per_n"]["1"]["interleaved"]
    assert iv["kernels"] == ["upstream", "upstream_aa", "upstream_bpb32", "tma"]
    run = probe_run(folder / "probe_touchi-hostbank.json", "h200/tree-cea31ee84447/probe_touchi-hostbank.json")
    assert run["variants"] == ["upstream", "upstream_bpb32", "tma"]


def test_the_committed_probe_page_is_what_the_probe_files_give(tmp_path):
    from experiments import report

    assert (report.ROOT / report.PAGE).read_text() == report.render(), "run python -m experiments.report"
    assert report.main(["--check"]) == 0
    (tmp_path / "dev").mkdir()
    assert report.main(["--root", str(tmp_path), "--check"]) == 1  # no page there yet
    with pytest.raises(SystemExit):
        report.main(["--root", str(tmp_path / "missing")])


def test_committed_experiment_results_hold_no_machine_paths():
    import re

    root = REPO_ROOT / "experiments" / "results"
    files = [p for p in root.rglob("*") if p.suffix in (".json", ".md", ".log")]
    assert len(files) > 100
    for path in files:
        assert not re.search(r"(/tmp/|/work/|/root/|/home/)", path.read_text(errors="replace")), f"{path}: a machine path"
