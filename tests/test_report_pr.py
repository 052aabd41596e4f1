"""CPU checks of the pull-request texts ``python -m report`` renders (results/PR-*.md): one per stacked pull request
of patches/pull-requests.txt, refused when that file names no patch, failing ``--check`` when they name another
series or cite a figure without its series, each with its stack's kernel-cache bytes and at most 400 words."""

from __future__ import annotations

import json
import re
import shutil
from pathlib import Path

import pytest

from freetoken_overlay.series import PATCHES_DIR, series_hash
from report.__main__ import main as report_main
from report.render import render
from report.series import PULL_REQUESTS, series_commits
from suite.results import REPO_ROOT

RESULTS = REPO_ROOT / "results"


THIRD = "docs: a third pull request"


def _add_a_patch(patches: Path, subject: str = THIRD, *, pull_request: bool = True) -> None:
    """A contributor's new commit as export writes it (a new file), and with ``pull_request`` the line in
    patches/pull-requests.txt that makes it the first patch of a pull request of its own."""
    name = f"{len(list(patches.glob('*.patch'))) + 1:04d}-docs-a-third-pull-request.patch"
    (patches / name).write_text(
        f"From 0000000000000000000000000000000000000000 Mon Sep 17 00:00:00 2001\nFrom: A Contributor <c@example.com>\n"
        f"Date: Tue, 14 Nov 2023 22:13:20 +0000\nSubject: [PATCH] {subject}\n\nA follow-up, offered on its own.\n---\n"
        " THIRD.md | 1 +\n 1 file changed, 1 insertion(+)\n create mode 100644 THIRD.md\n\n"
        "diff --git a/THIRD.md b/THIRD.md\nnew file mode 100644\nindex 0000000..1111111\n--- /dev/null\n+++ b/THIRD.md\n"
        "@@ -0,0 +1 @@\n+A third pull request.\n"
    )  # fmt: skip
    if pull_request:
        with (patches / PULL_REQUESTS).open("a") as f:
            f.write(f"{subject}\n")


@pytest.fixture
def series_copy(tmp_path: Path) -> Path:
    patches = tmp_path / "patches"
    shutil.copytree(PATCHES_DIR, patches)
    return patches


def _pr_pages(pages: dict[str, str]) -> list[str]:
    return sorted(n for n in pages if n.startswith("PR-"))


def test_a_new_pull_request_renders_and_leaves_the_earlier_ones_as_they_were(series_copy: Path) -> None:
    """A commit and a line in patches/pull-requests.txt: one more PR text (a third joined the second before), of
    that commit, on the series with it; each earlier PR text is what it was (it describes its own stack)."""
    before = render(RESULTS, series_copy)
    _add_a_patch(series_copy)
    after = render(RESULTS, series_copy)
    new = f"PR-{len(_pr_pages(before)) + 1}.md"
    assert _pr_pages(after) == _pr_pages(before) + [new]
    assert {n: after[n] for n in _pr_pages(before)} == {n: before[n] for n in _pr_pages(before)}
    assert after[new].startswith(f"# {THIRD}\n") and f"`{THIRD}`" in after[new]
    assert f"Series `{series_hash(series_copy)}`" in after[new] and "`THIRD.md` (+1)" not in after[new]  # a new file
    assert THIRD not in "".join(after[n] for n in _pr_pages(before))


@pytest.mark.parametrize("line", ["feat: a subject no patch has", THIRD])
def test_a_pull_request_file_naming_no_patch_or_out_of_order_is_refused_by_line(series_copy: Path, line: str,
                                                                                capsys) -> None:  # fmt: skip
    """A line that names no patch's subject, or a PR that starts before the one above it: the file, the line and
    what is allowed."""
    _add_a_patch(series_copy, pull_request=False)
    lines = (series_copy / PULL_REQUESTS).read_text().splitlines()
    first = next(i for i, x in enumerate(lines) if x and not x.startswith("#"))
    lines.insert(first + 1, line)  # right after the first PR's line: THIRD is there out of order
    (series_copy / PULL_REQUESTS).write_text("\n".join(lines) + "\n")
    assert report_main(["--results", str(RESULTS), "--patches", str(series_copy), "--check"]) == 1
    err = capsys.readouterr().err
    if line == THIRD:
        assert f"{series_copy / PULL_REQUESTS}: its lines name the pull requests' first patches in series order" in err
    else:
        assert f"{series_copy / PULL_REQUESTS}, line {first + 2}: {line!r} is no patch's subject" in err
        assert all(f"\n  {c['subject']}" in err for c in series_commits(series_copy))


@pytest.mark.parametrize("change", ["a new commit", "a reworded subject", "a pull request fewer"])
def test_a_pr_text_of_another_series_fails_the_check_naming_the_command(series_copy: Path, tmp_path: Path,
                                                                        change: str, capsys) -> None:  # fmt: skip
    """After an export (a new commit, a reworded one) the PR texts described the old series and --check passed.
    Now it fails, naming the page, the series and the command that re-renders; after that command it passes. A PR
    text of a pull request the series no longer has is named, and left where it is."""
    out = tmp_path / "pages"
    out.mkdir()
    for page, text in render(RESULTS, series_copy).items():  # the pages of the series before the change
        (out / page).write_text(text)
    check = ["--results", str(RESULTS), "--out", str(out), "--patches", str(series_copy), "--check"]
    assert report_main(check) == 0
    capsys.readouterr()
    prs = _pr_pages(render(RESULTS, series_copy))
    if change == "a new commit":
        _add_a_patch(series_copy, pull_request=False)  # it joins the last PR
        stale = [prs[-1]]
    elif change == "a reworded subject":
        second = sorted(series_copy.glob("*.patch"))[1]
        second.write_text(re.sub(r"(?m)^(Subject: \[PATCH\]) ", r"\1 reworded: ", second.read_text(), count=1))
        stale = prs  # the first PR's commits, and the series every later one stacks on
    else:
        lines = (series_copy / PULL_REQUESTS).read_text().splitlines()
        (series_copy / PULL_REQUESTS).write_text("\n".join(lines[:-1]) + "\n")  # the last PR joins the one before
        stale = prs[-2:-1]
    assert report_main(check) == 1
    err = capsys.readouterr().err
    for page in stale:
        assert f"[report] {out / page} does not describe the JSON and the series in patches/ (series " \
               f"{series_hash(series_copy)}); re-render it: nox -s report (or python -m report)" in err  # fmt: skip
    assert not [p for p in prs[:-1] if p not in stale and str(out / p) in err]  # PR texts of the same stack pass
    if change == "a pull request fewer":
        assert f"[report] {out / prs[-1]}: the series has no such pull request (patches/{PULL_REQUESTS} names " \
               f"them); git rm it, or name its first patch there" in err  # fmt: skip
    assert report_main(check[:-1]) == 0  # the command the message names
    assert report_main(check) == (1 if change == "a pull request fewer" else 0)
    assert (out / prs[-1]).is_file()  # a page it did not write this time stays


# --------------------------------------------------------------------------- figures true by construction (issue 55)

LABEL = re.compile(r"\s*\(?\{\{[^}]*\|\s*series[^}]*\}\}\)?")  # a label in a template: `{{ x | series }}`, its brackets


@pytest.fixture
def templates(tmp_path: Path, monkeypatch):
    """A copy of report/templates/ that render() uses while the test runs (its jinja environment rebuilt)."""
    from report import render as rendering

    copy = tmp_path / "templates"
    shutil.copytree(rendering.TEMPLATES, copy)
    monkeypatch.setattr(rendering, "TEMPLATES", copy)
    rendering.environment.cache_clear()
    yield copy
    rendering.environment.cache_clear()


def test_a_pr_text_citing_a_figure_with_no_series_fails_the_check_naming_its_lines(templates: Path, capsys) -> None:
    """A template that drops the series labels from PR-1's own lines: the check fails, naming PR-1.md and each line
    that now shows a figure of another series unlabelled; nothing is written."""
    pr1 = templates / "PR-1.md.j2"
    assert LABEL.search(pr1.read_text())
    pr1.write_text(LABEL.sub("", pr1.read_text()))
    committed = (RESULTS / "PR-1.md").read_text()
    assert report_main(["--results", str(RESULTS), "--check"]) == 1
    err = capsys.readouterr().err
    assert "[report] error: PR-1.md: figures with no series" in err
    unlabelled = [x for x in err.splitlines() if x.startswith("  line ")]
    assert unlabelled and all("series `" not in x for x in unlabelled)
    assert any(" ±" in x for x in unlabelled)  # the table's ratios and their A/A spreads
    assert (RESULTS / "PR-1.md").read_text() == committed


def test_a_document_without_its_series_cannot_be_cited(tmp_path: Path) -> None:
    """The data side: a run whose document records no series renders nowhere; with its series, it does, and every
    line that shows one of its figures names it."""
    from freetoken_overlay.util import OverlayError

    src = json.loads((RESULTS / "h100-80gb-hbm3" / "series_bench.json").read_text())
    lone = tmp_path / "results" / "lone-gpu"
    lone.mkdir(parents=True)
    (lone / "series_bench.json").write_text(json.dumps(src))
    pages = render(tmp_path / "results")
    series = src["provenance"]["series_hash"]
    shown = [x for page in pages.values() for x in page.splitlines() if re.search(r"\d\.\d{3}\b", x)]
    assert shown and all(series in x for x in shown)  # the machine line too: "series <hash>"
    for where in ("provenance", "machine"):
        src[where].pop("series_hash", None)
    (lone / "series_bench.json").write_text(json.dumps(src))
    with pytest.raises(OverlayError, match="figures with no series"):
        render(tmp_path / "results")


def test_each_pr_states_its_kernel_cache_against_upstreams_from_the_build_of_its_stack(tmp_path: Path) -> None:
    """Each PR text gives the decode_gather entry of the kernel cache built from its own stack (a MANIFEST.json that
    nox -s build writes, recorded under results/kernel-cache/): bytes over upstream's cache, which has none; a PR whose
    stack has no such record says so."""
    from freetoken_overlay.series import patch_files
    from report.model import KERNEL_CACHE, context

    prs = context(RESULTS)["prs"]
    (tmp_path / KERNEL_CACHE).mkdir()
    first = series_hash(files=patch_files()[: prs[0]["commits"][-1]["number"]])
    manifest = {"freetoken": f"0.2.1+dg.{first}", "cuda_arch_list": "9.0 12.0", "nvcc": "Cuda compilation tools, "
                "release 13.0, V13.0.88", "kernels": {"freetoken__decode_gather_8_3_16384": 1234, "other": 99}}  # fmt: skip
    (tmp_path / KERNEL_CACHE / f"{first}.json").write_text(json.dumps(manifest))
    pages = render(tmp_path)
    assert ("+1,234 B over upstream's AOT cache (ring 8x3x16384, sm_90/sm_120, nvcc 13.0; "
            f"series `{first}`)") in pages["PR-1.md"]  # fmt: skip
    assert "Kernel cache**: not yet measured for this series." in pages["PR-2.md"]


def test_the_committed_pr_texts_fit_400_words():
    for page in sorted(RESULTS.glob("PR-*.md")):
        assert len(page.read_text().split()) <= 400, f"{page}: a pull-request text of at most 400 words"
