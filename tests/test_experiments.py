"""CPU checks of what experiments/ keeps: the committed probe files name their kernels in the switch's words
and hold no machine paths."""

from __future__ import annotations

import re

from suite.results import REPO_ROOT, read_json

ROOT = REPO_ROOT / "experiments" / "results"


def test_committed_probe_files_name_their_kernels_in_the_switchs_words():
    """Every label of the committed probe files is the switch's (upstream, upstream_aa, upstream_bpb32,
    upstream_<load>, tma, ...), suffixes (@regime, |neighbour) after it: none of the words of before it."""
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
    iv = read_json(ROOT / "h200" / "tree-cea31ee84447" / "probe_touchi-hostbank.json")["per_n"]["1"]["interleaved"]
    assert iv["kernels"] == ["upstream", "upstream_aa", "upstream_bpb32", "tma"]


def test_committed_experiment_results_hold_no_machine_paths():
    files = [p for p in ROOT.rglob("*") if p.suffix in (".json", ".md", ".log")]
    assert len(files) > 100
    for path in files:
        assert not re.search(r"(/tmp/|/work/|/root/|/home/)", path.read_text(errors="replace")), f"{path}: a machine path"
