"""CPU checks of experiments/ (no GPU): the page toucher and its offsets, the 2 MiB-page banks, the kernel
variants' text edits, the interleaved probe's rounds, the split regimes."""

from __future__ import annotations

import pytest

from experiments.regimes import HUGE_PAGE, HugePageBank
from suite.results import REPO_ROOT


@pytest.mark.parametrize("feat,stride", [(48, 16), (16_000, 4096), (3 * 4096, 4096), (1_600_000, 64 << 10), (1_048_576, 2 << 20)])
def test_touch_offsets_hit_every_block_a_row_spans_and_nothing_else(feat, stride):
    """experiments.harness.touch_offsets against a byte walk of each row: the blocks its addresses fall
    in are exactly the ``stride``-aligned blocks the row spans, every address inside the row and 16-byte aligned."""
    torch = pytest.importorskip("torch")
    from experiments.harness import touch_offsets

    base = torch.tensor([3 * 4096 + 80, 1 << 21, (5 << 21) - 4096], dtype=torch.int64)  # unaligned, aligned, just below
    rows = torch.tensor([[0, 7, 2], [5, 1, 3], [0, 4, 6]])
    got = touch_offsets(base, rows, feat, stride)
    k = got.shape[1] // rows.shape[1]
    for layer in range(3):
        for i in range(3):
            start = int(base[layer]) + int(rows[layer, i]) * feat
            want = {a // stride for a in range(start, start + feat, 16)}
            offs = [int(base[layer]) + int(o) for o in got[layer, i * k : (i + 1) * k]]
            assert all(start <= a < start + feat and a % 16 == 0 for a in offs)
            assert {a // stride for a in offs} == want


def test_huge_page_bank_is_aligned_exact_and_refuses_unknown_backings():
    pytest.importorskip("torch")
    bank = HugePageBank(3 * 4096 + 16, "thp")  # no pin(): registration needs CUDA
    assert bank.tensor.data_ptr() % HUGE_PAGE == 0
    assert bank.tensor.numel() == 3 * 4096 + 16 and bank.span == HUGE_PAGE
    bank.tensor.fill_(7)
    assert int(bank.tensor.sum()) == 7 * bank.tensor.numel()
    bank.unpin()  # not pinned: nothing to undo
    with pytest.raises(ValueError, match="backing='4k': expected thp or hugetlb"):
        HugePageBank(16, "4k")


def test_upstream_load_variants_replace_the_row_load_once():
    from experiments import variants

    text = "before\n" + variants.FIC_LOAD + "after\n"
    out = variants.upstream_load_variant(text, "nc_l2_256")
    assert "ld.global.nc.L2::256B.v4.u32" in out and variants.FIC_LOAD not in out
    assert out.startswith("before\n") and out.endswith("after\n")
    with pytest.raises(SystemExit, match="not found once"):
        variants.upstream_load_variant(text + variants.FIC_LOAD, "nc")
    with pytest.raises(SystemExit, match="unknown upstream load 'l2'"):
        variants.upstream_load_variant(text, "l2")
    installed = REPO_ROOT / ".work/upstream/python/freetoken/kernel/csrc/jit/fast_index_copy.cuh"
    if installed.exists():  # the pinned kernel (after `nox -s apply`) holds the block exactly once
        assert installed.read_text().count(variants.FIC_LOAD) == 1


def test_the_probe_kernel_variants_apply_to_the_patched_kernel(tmp_path):
    """experiments.variants.make on the series' decode_gather.cuh (after `nox -s apply`): the hybrid and
    prewalk variants' blocks are found exactly once (the prologue variants were written for earlier
    kernels and are skipped, by name); a hybrid runs 256 threads and leaves small calls before the ring."""
    from experiments import variants

    jit = REPO_ROOT / ".work/upstream/python/freetoken/kernel/csrc/jit"
    if not (jit / "decode_gather.cuh").exists():
        pytest.skip("no applied series in .work/upstream (run `nox -s apply`)")
    files, texts, skipped = variants.make(jit, ["current", *variants.VARIANTS])
    assert {"current", "exit_read", "hybrid1", "hybrid2", "prewalk"} <= set(files) and set(skipped) == set(variants.VARIANTS) - set(files)
    hybrid = texts["dg_hybrid2.cuh"]
    assert "kThreads = 256" in hybrid and "if (n <= 2) {" in hybrid
    assert hybrid.index("if (n <= 2) {") < hybrid.index("mbar_init(&smem.full[lane])")
    (tmp_path / "decode_gather.cuh").write_text("no blocks here\n")
    assert set(variants.make(tmp_path, ["hybrid1"])[2]) == {"hybrid1"}


def test_page_toucher_reads_the_blocks_of_the_current_list_and_checks_them():
    """experiments.harness.page_toucher on CPU tensors, with a stand-in for upstream's kernel that reads
    the banks' bytes at the descriptor it is given: the hook passes through its own byte check, and a
    kernel that read the wrong bytes fails it."""
    torch = pytest.importorskip("torch")
    import types

    from experiments.harness import page_toucher
    from gpukit.decode_regime import Footprint, RegimeGraphs, poisoned_slots

    fp = Footprint(layers=2, experts=6, row_bytes=(4096 + 32, 160))
    g = torch.Generator().manual_seed(3)
    ref = [torch.randint(0, 256, (2, 6, r), dtype=torch.uint8, generator=g) for r in fp.row_bytes]
    ptrs = [torch.tensor([(1 << 30) * (layer + 1) + (8 << 20) * b + 4096 for b in range(2)]) for layer in range(2)]
    banks = types.SimpleNamespace(fp=fp, device=torch.device("cpu"), src_ptrs=ptrs, ref=ref)
    rg = RegimeGraphs(banks, poisoned_slots(fp.row_bytes, "cpu", slots=8), 2)
    memory = {int(ptrs[layer][b]): ref[b][layer].view(-1) for layer in range(2) for b in range(2)}

    class Kernel:  # fast_index_copy_multi_jit for one bank: row i of `feat` bytes at base + feat * src[i]
        shift = 0

        def fast_index_copy_multi_jit(self, dst_ptrs, src_ptrs, feat, dst, src, num, **_):
            f, mem = int(feat[0]), memory[int(src_ptrs[0])]
            rows = mem[((src.long() * f + self.shift) % mem.numel())[:, None] + torch.arange(f)]
            touch.scratch.view(-1, f)[dst.long()] = rows

    kernel = Kernel()
    touch = page_toucher(kernel, rg, 4096)
    touch(rg)
    rg.next_list()
    touch(rg)
    kernel.shift = 16
    with pytest.raises(AssertionError, match="bank 0"):
        touch(rg)


def test_interleaved_probe_times_every_kernel_in_every_regime_against_upstream_decode(monkeypatch):
    """experiments.probe_fresh.interleaved with a stand-in for the graphs: one variant per kernel and
    regime in the same rounds, touch regimes timed as decode with their touch hook, ratios against
    ``upstream@decode`` and the A/A from ``upstream_aa@decode``."""
    pytest.importorskip("torch")
    import types

    from experiments import harness, probe_fresh

    cost = {"decode": 40.0, "replay": 38.0, "decode_touch4K": 39.0}
    calls = []

    def time_set(kernel, regime, reps, *, prepare=None):
        calls.append((kernel, regime, prepare))
        label = "decode_touch4K" if prepare is not None else regime
        return cost[label] * (0.99 if kernel == "tma" else 1.0)

    monkeypatch.setattr(harness, "page_toucher", lambda fic, rg, stride: ("touch", stride))
    rg = types.SimpleNamespace(n=1, time_set=time_set)
    out = probe_fresh.interleaved(rg, None, {"upstream": None, "upstream_aa": None, "tma": None}, ["decode", "replay", "decode_touch4K"], 3)
    assert len(calls) == 3 * 3 * 3 and {c[2] for c in calls if c[1] == "decode"} == {None, ("touch", 4096)}
    s = out["summary"]
    assert "upstream_aa@decode" not in s and s["upstream@decode"]["speedup_paired"] == 1.0 and s["upstream@decode"]["aa_spread"] == 0.0
    assert s["upstream@replay"]["speedup_paired"] == pytest.approx(40 / 38) and s["upstream@decode_touch4K"]["speedup_paired"] == pytest.approx(40 / 39)
    assert s["tma@decode"]["speedup_paired"] == pytest.approx(1 / 0.99)
    assert len(out["rounds_us"]["tma@replay"]) == 3


def test_probe_graphs_split_regimes_renew_one_side_of_the_list_only():
    """experiments.regimes.ProbeGraphs: ``decode_src`` renews the host rows into the same slots,
    ``decode_dst`` the slots for the same rows, ``decode`` both; gpukit's graphs refuse the split labels."""
    torch = pytest.importorskip("torch")
    import types

    from experiments.regimes import ProbeGraphs
    from gpukit.decode_regime import Footprint, RegimeGraphs, poisoned_slots

    fp = Footprint(layers=2, experts=8, row_bytes=(32,))
    banks = types.SimpleNamespace(fp=fp, device=torch.device("cpu"), src_ptrs=[None] * 2,
                                  ref=[torch.zeros((2, 8, 32), dtype=torch.uint8)])  # fmt: skip
    rg = ProbeGraphs(banks, poisoned_slots(fp.row_bytes, "cpu", slots=16), 2)
    rows, slots = rg.src.clone(), rg.dst.clone()
    rg.advance("decode_src")
    assert torch.equal(rg.dst, slots) and not torch.equal(rg.src, rows)
    rows = rg.src.clone()
    rg.advance("decode_dst")
    assert torch.equal(rg.src, rows) and not torch.equal(rg.dst, slots)
    slots = rg.dst.clone()
    rg.advance("replay")
    assert torch.equal(rg.src, rows) and torch.equal(rg.dst, slots)
    plain = RegimeGraphs(banks, poisoned_slots(fp.row_bytes, "cpu", slots=16), 2)
    with pytest.raises(ValueError, match="regime='decode_src'"):
        plain.time_set("k", "decode_src", 1)


def test_model_banks_refuse_an_unknown_backing():
    from experiments.regimes import model_banks

    with pytest.raises(ValueError, match="backing='4k': expected one of hostbank, thp, hugetlb"):
        model_banks(None, "cpu", "4k")


def test_interleaved_touch_probe_rows_and_the_share_a_touch_takes_back(tmp_path):
    """An interleaved probe file becomes one row per regime and n (ratios against upstream@decode, the A/A of
    upstream_aa@decode), and each kernel's fresh-row cost and the share each touch takes back are worked out
    from the rounds' medians: hand-computed here for a 40/38/39 µs decode/replay/touched kernel."""
    from suite.results import write_json
    from experiments.report import regime_probe_view

    rounds = {"upstream@decode": [40.0, 40.2, 39.8], "upstream_aa@decode": [40.1, 40.0, 39.9], "upstream@replay": [38.0] * 3,
              "upstream@decode_touch2M": [39.0] * 3, "tma@decode": [41.0] * 3, "tma@replay": [40.0] * 3,
              "tma@decode_touch2M": [40.5] * 3}  # fmt: skip
    from suite.stats import summarize_rounds

    summ = {k: summarize_rounds(rounds, candidate=k, base="upstream@decode", aa="upstream_aa@decode") for k in rounds if k != "upstream_aa@decode"}
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
