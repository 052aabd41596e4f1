"""CPU checks of the report, the sweep's dry run and the committed pytest-benchmark storage (no GPU).

The figures in the committed pages must equal the JSON's; the committed storage must show upstream
and decode_gather side by side with the ratios of bench.json."""

from __future__ import annotations

import json
import re
import shutil
import subprocess

import pytest

from bench import report
from gpukit import commands
from gpukit.schema import RESULTS


def _row(layers, n, up, ours, verdict, ideal=None, ceiling=55.0):
    return {
        "layers": layers, "n": n, "us": {"upstream": up, "ours": ours}, "speedup": up / ours,
        "verdict": verdict, "ideal_us": ideal, "ceiling_gbps": ceiling,
    }


def test_targets_section_checks_each_target_from_the_rows():
    from bench import report

    rows = [
        _row(40, 0, 1.2, 1.1, "faster"),
        _row(40, 1, 38.0, 38.5, "slower"),
        _row(40, 2, 73.0, 72.0, "faster"),
        _row(40, 4, 145.0, 140.0, "faster", ideal=128.0),
        _row(16, 1, 38.0, 39.0, "slower"),  # not the 40-layer graph: ignored
        _row(4, 600, 20800.0, 20600.0, "faster", ideal=19000.0),
    ]
    data = {"x": {"bench": {"gather": rows, "machine": {"device_name": "Test GPU"}},
                  "ceiling": {"ring": [{"gather_gbps": 51.0}], "ldg": [{"gather_gbps": 50.0}]}}}
    text = "\n".join(report.targets_section(data))
    assert "Test GPU, 40-layer graph (n = 600: 4 layers)" in text
    assert "not met at n = 1 (0.987, slower)." in text
    assert "n = 4: 1.094x, n = 600: 1.084x." in text
    assert "reached 51.0 GB/s (93% of it): at that rate a copy takes 1.078x the ideal before any fixed cost." in text
    # one expert: 72.0 - 38.5 = 33.5 us streaming, 38.5 - 33.5 = 5.0 us fixed; 1.05x needs 38.0 / 1.05
    assert "33.5 µs of streaming (n = 2 minus n = 1) plus 5.0 µs fixed, 1.10 µs of which" in text
    assert f"needs {38.0 / 1.05:.1f} µs, i.e. a fixed part of {38.0 / 1.05 - 33.5:.1f} µs" in text
    rows[1] = _row(40, 1, 38.0, 37.9, "tie")
    assert "Speedup >= 1.00 at every n: met at every n." in "\n".join(report.targets_section(data))
    assert report.targets_section({"y": {}}) == []


def test_decode_step_note_reads_the_ratio_against_its_aa_control():
    from bench import report

    d = {"rounds_us": {"unset": [100.0, 110.0], "tma": [101.0, 108.0]}, "speedup": 0.99, "verdict": "tie"}
    old = report.decode_step_note(d)
    assert "0.990-1.019 over 2 rounds (not resolved: the range spans 1.0)" in old and "no A/A control" in old
    new = report.decode_step_note({**d, "aa_spread": 0.02})
    assert "spreads ±0.020, so the median ratio 0.990 is a tie." in new and "no A/A" not in new

def test_sweep_dry_run(tmp_path):
    from bench import sweep

    assert sweep.main(["--dry-run", "--out", str(tmp_path), "--quick"]) == 0
    doc = json.loads((tmp_path / "ceiling.json").read_text())
    assert doc["synthetic"] and doc["ring"] and doc["summary"]["copy_engine_gbps"]
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert doc["png"] is None
    else:
        assert (tmp_path / "ceiling.png").stat().st_size > 10_000




def test_report_renders_the_synthetic_tree(synthetic_results, tmp_path):
    pages = report.render(synthetic_results)
    assert set(pages) == {"README.md", "REPORT.md", "PR.md"}
    readme, rep, pr = pages["README.md"], pages["REPORT.md"], pages["PR.md"]
    assert "Synthetic GPU (dry run)" in readme and "| Synthetic GPU (dry run) | gather, 40 layers | 1 |" in readme
    assert rep.index("**Verdict.**") < rep.index("## Synthetic GPU")
    summary = pr.split("## What changed")[0].strip().splitlines()
    assert len([line for line in summary if line.startswith("- ")]) == 5
    assert commands.upstream_bench_line() in summary[-1]
    assert "bench/" not in pr.split("## Reproduce")[1], "PR.md's reproduce section names overlay paths"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "No results yet" in report.render(empty)["REPORT.md"]


def test_committed_pages_are_the_rendering_of_the_committed_json():
    """``nox -s report`` has been run after the last change to the JSON or the templates."""
    for name, text in report.render(RESULTS).items():
        assert (RESULTS / name).read_text() == text, f"results/{name} is stale: run nox -s report"


def test_committed_figures_equal_the_json():
    bench = json.loads((RESULTS / "h200" / "bench.json").read_text())
    readme = (RESULTS / "README.md").read_text()
    rep = (RESULTS / "REPORT.md").read_text()
    for row in bench["gather"]:
        if row["layers"] == 40 or row["n"] > 32:
            cells = f"| gather, {row['layers']} layers | {row['n']} | {row['speedup']:.3f} | ±{row['aa_spread']:.3f} |"
            assert cells in readme, cells
        assert f"| {row['speedup']:.3f} | ±{row['aa_spread']:.3f} |" in rep
    d = bench["decode_step"]
    assert f"{d['speedup']:.3f} against an A/A spread of ±{d['aa_spread']:.3f}" in readme


def _compare_rows(out: str) -> dict[str, float]:
    """{test name: median} from ``pytest-benchmark compare --columns=median,...`` output."""
    rows = {}
    for line in out.splitlines():
        m = re.match(r"(test_\S+\[\S+\])\s+([\d,.]+)", line)
        if m:
            rows[m.group(1)] = float(m.group(2).replace(",", ""))
    return rows


def test_pytest_benchmark_compare_shows_the_kernels_side_by_side():
    exe = shutil.which("pytest-benchmark")
    if exe is None:
        pytest.skip("pytest-benchmark is not installed (the test group installs it)")
    args = [a.replace("{device}", "h200") for a in commands.COMPARE.args]
    proc = subprocess.run([exe, *args[1:]], capture_output=True, text=True, cwd=RESULTS.parent, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "benchmark 'n=1'" in proc.stdout and "benchmark 'n=step'" in proc.stdout
    rows = _compare_rows(proc.stdout)
    bench = json.loads((RESULTS / "h200" / "bench.json").read_text())
    for row in bench["gather"]:
        case = f"L{row['layers']}-n{row['n']}"
        up, ours = rows[f"test_gather_graph[{case}-upstream]"], rows[f"test_gather_graph[{case}-decode_gather]"]
        assert up / ours == pytest.approx(row["speedup"], abs=2e-4), case
    d = bench["decode_step"]
    up, ours = rows["test_decode_step_offload_cache[L40-step-upstream]"], rows["test_decode_step_offload_cache[L40-step-decode_gather]"]
    assert up / ours == pytest.approx(d["speedup"], abs=2e-4)
