"""The probes' own page: ``experiments/results/PROBES.md``, rendered from the probe documents kept under
``experiments/results/<device>/<tree>/probe_*.json`` (what ran them: experiments/README.md).

    python -m experiments.report            # writes experiments/results/PROBES.md
    python -m experiments.report --check    # fails when the committed page is not what the files give

Per device and run: every kernel variant's paired ratio to upstream per miss count and regime, with its
verdict against the run's A/A spread; for an interleaved run, what the fresh rows cost each kernel and
the share of it each touch takes back. Nothing here feeds the verdicts of ``python -m report``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path
from typing import Any, Mapping

from suite import results
from suite.geometry import REGIMES, fmt_bytes, regime_key
from suite.kernels import Kernel
from suite.log import configure
from suite.stats import median, verdict

log = logging.getLogger("experiments.report")  # its name also when run as __main__

#: experiments' results folder: ``<device>/<tree id>/<file>``
ROOT = Path(__file__).resolve().parent / "results"
PAGE = "PROBES.md"
#: the probes' regimes beyond the suite's: the two halves of ``decode`` (new rows into the same slots, the same
#: rows into new slots) and ``decode`` with 16 bytes of every 4 KiB, 64 KiB or 2 MiB block of the rows read first
SPLIT_REGIMES = ("decode_src", "decode_dst")
TOUCH_REGIMES = ("decode_touch4K", "decode_touch64K", "decode_touch2M")
REGIME_ORDER = REGIMES + SPLIT_REGIMES + TOUCH_REGIMES
#: how a run's bank backing reads on the page
PAGE_WORDS = {"hostbank": "FreeToken's HostBank pages (4 KiB)", "thp": "transparent 2 MiB pages",
              "hugetlb": "hugetlbfs 2 MiB pages"}  # fmt: skip


def touch_recovery(n: int, iv: dict[str, Any]) -> list[dict[str, Any]]:
    """Per kernel of an interleaved probe (``interleaved`` of one miss count): the fresh rows' cost (median
    µs per layer, decode - replay) and the share of it each touch regime takes back
    ((decode - touched) / (decode - replay))."""
    med = {lab: median(v) for lab, v in iv["rounds_us"].items() if v}
    touches = [r for r in iv["regimes"] if r in TOUCH_REGIMES]
    out = []
    for k in iv["kernels"]:
        dec, rep = med.get(f"{k}@decode"), med.get(f"{k}@replay")
        if k == Kernel.UPSTREAM_AA or dec is None or rep is None or not touches or dec <= rep:
            continue
        shares = {r: (dec - med[f"{k}@{r}"]) / (dec - rep) for r in touches if f"{k}@{r}" in med}
        out.append({"n": n, "kernel": k, "gap_us": dec - rep, "shares": shares})
    return out


def probe_run(path: Path, name: str) -> dict[str, Any] | None:
    """One probe document as table rows (None when it holds no per-n regimes: the prologue probes)."""
    doc = results.read_json(path) or {}
    rows, rounds, recovered, interleaved = [], set(), [], False

    def add_row(n: str, reg: str, spread: float, summaries: Mapping[str, Any]) -> None:
        cells = [{"name": k, "ratio": s["ratio_paired"], "verdict": verdict(s["ratio_paired"], spread)}
                 for k, s in summaries.items()]  # fmt: skip
        rows.append({"n": int(n), "regime": reg, "aa_spread": spread, "cells": cells})

    for n, entry in (doc.get("per_n") or {}).items():
        iv = entry.get("interleaved")
        if iv:  # every kernel@regime in the same rounds, each against upstream@decode
            interleaved = True
            rounds.update(len(v) for v in iv["rounds_us"].values())
            recovered += touch_recovery(int(n), iv)
            for reg in iv["regimes"]:
                summ = {k: iv["summary"][f"{k}@{reg}"] for k in iv["kernels"]
                        if k != Kernel.UPSTREAM_AA and f"{k}@{reg}" in iv["summary"]}  # fmt: skip
                add_row(n, reg, iv["summary"][f"{Kernel.UPSTREAM}@decode"]["aa_spread"], summ)
        for reg in sorted((k for k in entry if k in REGIME_ORDER), key=lambda k: regime_key(k, REGIME_ORDER)):
            rounds.update(len(v) for v in (entry[reg].get("rounds_us") or {}).values())
            summ = entry[reg]["summary"]
            add_row(n, reg, next(iter(summ.values()))["aa_spread"], summ)
    if not rows:
        return None
    rows.sort(key=lambda r: (regime_key(r["regime"], REGIME_ORDER), r["n"]))
    return {
        "file": name,
        "series": (doc.get("provenance") or {}).get("series_hash") or doc.get("series_hash"),
        "footprint": doc.get("footprint"),
        "pages": PAGE_WORDS.get((doc.get("bank_pages") or {}).get("backing")),
        "variants": [c["name"] for c in rows[0]["cells"]], "rounds": "/".join(str(r) for r in sorted(rounds)),
        "interleaved": interleaved, "recovered": recovered, "rows": rows, "step": doc.get("step"),
    }


def regime_probe_view(base: Path, slug: str) -> dict[str, Any] | None:
    """The decode-regime probes of one device (``<slug>/<tree>/probe_*.json`` under ``base``): per run,
    per miss count and regime, every kernel variant's paired ratio to upstream with its verdict against
    the run's A/A spread; rows in numeric order, decode before replay."""
    runs = [run for path in sorted((base / slug).glob("*/probe_*.json"))
            if (run := probe_run(path, path.relative_to(base).as_posix()))]  # fmt: skip
    return {"runs": runs} if runs else None


INTRO = """\
`python -m experiments.probe_fresh`: per layer in a captured graph over the model's bank footprint (HostBank: mmap, \
fill, register), a new miss list before every replay (`decode`) or one list replayed (`replay`), paired alternating \
rounds (their number named with each run), every replay byte-verified; ratio = upstream (8 blocks per bank) / \
variant, paired per round, and its verdict against the run's A/A spread. `upstream_bpb32`: upstream at 32 blocks \
per bank; `tma`: the series' kernel; `tma+t1`/`t2`/`t3`: the ring with a second warp that touches every 4 KiB host page of \
the CTA's later chunks first (`prefetch.global.L2`, a 4-byte load, `cp.async.bulk.prefetch.L2` of the chunk; \
kernel: `{slug}/tree-f6d9b53d0132/ktouch-experiment.patch`, not in the series); `tma_<ring>`: other rings of the \
series' kernel; `tma_hybrid1`/`tma_hybrid2`: the series' kernel at 256 threads per CTA, a call of at most 1 (2) rows \
copied by every thread with 16-byte loads instead of the ring, on its 16 CTAs, and `tma_hybrid1w`/`tma_hybrid2w` on \
64 CTAs; `tma_prewalk`: the series' kernel with a second warp per CTA that reads 4 bytes in every 2 MiB block of the \
call's rows as soon as the count is known (`experiments/variants.py`). `upstream_nc`, `upstream_nc_l2_128`, \
`upstream_nc_l2_256`: upstream's kernel with its row load written in PTX (`ld.global.nc`), without and with an L2 fetch-size hint. \
`decode_src`: new host rows before every replay into the same slots; `decode_dst`: the same rows into new slots (the \
two halves of `decode`). `decode_touch4K`, `decode_touch64K`, `decode_touch2M`: `decode`, with 16 bytes in every \
4 KiB, 64 KiB or 2 MiB block of the new list's host rows read by a separate kernel before the clock starts (the timed \
replay then finds warm whatever a first read of a block warms, its address translations above all, and almost none \
of the rows' bytes). The backing named with a run is where its banks' pages came from (`--backing`)."""


def _ratio(x: float | None) -> str:
    return "–" if x is None else f"{x:.3f}"


def run_lines(run: dict[str, Any]) -> list[str]:
    fp = run["footprint"] or {}
    what = f"series `{run['series']}`, {fp.get('layers')} layers x {fp.get('experts')} experts, "
    what += f"{fmt_bytes(fp['bytes']) if fp.get('bytes') else '–'} of banks"
    what += f" on {run['pages']}" if run["pages"] else ""
    what += f", {run['rounds']} rounds" if run["rounds"] else ""
    head = f"`{run['file']}` ({what})"
    if run["interleaved"]:
        head += ("; every kernel in every regime timed in each round, and each ratio = upstream in the `decode` "
                 "regime / the kernel in the row's regime (so `upstream` in a touch row is what the touch saves upstream's kernel)")  # fmt: skip
    header = ["regime", "n / layer", "A/A", *run["variants"]]
    out = [head + ":", "", "| " + " | ".join(header) + " |", "|---|" + "---:|" * (len(header) - 1)]
    for r in run["rows"]:
        cells = " | ".join(f"{_ratio(c['ratio'])} ({c['verdict']})" for c in r["cells"])
        out.append(f"| {r['regime']} | {r['n']} | ±{r['aa_spread']:.3f} | {cells} |")
    if run["recovered"]:
        out += ["", "What fresh rows cost each kernel in this run (median µs per layer, `decode` - `replay`), and the share "
                "of it a touch before the clock takes back ((`decode` - touched) / (`decode` - `replay`)):", ""]  # fmt: skip
        for r in run["recovered"]:
            shares = ", ".join(f"`{reg}` {100 * s:.0f}%" for reg, s in r["shares"].items())
            out.append(f"- n = {r['n']}, `{r['kernel']}`: {r['gap_us']:.2f} µs; {shares}.")
    if run["step"]:
        step = ", ".join(f"{k} {_ratio(v.get('paired'))}" for k, v in run["step"].items())
        out += ["", f"Decode step of the real OffloadMoeCache in the same run (upstream / variant, paired): {step}."]
    return out


def render(base: Path = ROOT) -> str:
    """The page: one section per device that holds probe runs."""
    out = ["# Decode-regime probes: what was tried for the cold rows", "",
           "Rendered by `python -m experiments.report` from the probe files under `experiments/results/`; "
           "what each file is and how it was run: [README.md](README.md).", ""]  # fmt: skip
    for slug in sorted(p.name for p in base.iterdir() if p.is_dir()):
        view = regime_probe_view(base, slug)
        if view is None:
            continue
        out += [f"## {slug}", "", INTRO.format(slug=slug)]
        for run in view["runs"]:
            out += ["", *run_lines(run)]
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=ROOT, help="experiments' results folder (default: %(default)s)")
    ap.add_argument("--check", action="store_true", help="write nothing; fail when the page differs")
    args = ap.parse_args(argv)
    configure()
    if not args.root.is_dir():
        ap.error(f"--root {args.root}: not a directory")
    text, page = render(args.root), args.root / PAGE
    if args.check:
        if not page.is_file() or page.read_text() != text:
            log.error("%s is not what the probe files give; run python -m experiments.report", page)
            return 1
        log.info("%s is up to date", page)
        return 0
    tmp = page.with_suffix(".md.tmp")
    tmp.write_text(text)
    tmp.replace(page)  # whole or not at all
    log.info("wrote %s", page)
    return 0


if __name__ == "__main__":
    sys.exit(main())
