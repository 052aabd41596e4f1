"""Run-to-run variation: the current runs' decode-regime ratios beside every earlier run of the same
patched tree in the history the writer keeps (``results/<device>/history/tree-<tree id>/``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Mapping

from suite import results
from suite.commands import MEASUREMENTS
from suite.models import BenchRun, Model, SeriesBench
from report.gather import gather_view, main_rows
from report.geometries import first_geometry_ratios
from report.views import series_bench_view
from suite.stats import Comparison


def bench_decode_ratios(gather: dict[str, Any] | None) -> dict[int, Comparison]:
    """{n: Comparison} of tma against upstream's default kernel in the decode regime of one project benchmark
    run: its :func:`gather_view` (the largest graph per n)."""
    rows = [r for r in (gather or {}).get("all_rows", []) if r["regime"] == "decode"]
    return {r["n"]: r["ratio"] for r in main_rows(rows)}


#: The runs a repeat table compares, with the words the report uses for them.
REPEAT_KINDS = {"bench": "the project benchmark", "series_bench": "the series' benchmark"}


def current_ratios(gather: dict[str, Any] | None, ubench: dict[str, Any] | None) -> dict[str, dict[int, Any]]:
    """{kind: its decode ratios} of a device's current project and series benchmark runs."""
    return {"bench": bench_decode_ratios(gather), "series_bench": first_geometry_ratios(ubench)}


#: {kind: the decode ratios of one of its runs (a model)} of the runs a repeat table compares.
REPEAT_VIEWS = {"bench": lambda d: bench_decode_ratios(gather_view(d)),
                "series_bench": lambda d: first_geometry_ratios(series_bench_view(d))}  # fmt: skip


def _same_series_format(old: Any, doc: SeriesBench) -> SeriesBench | None:
    """An earlier run of the series' benchmark in the format of ``doc`` (the same schema and benchmark schema:
    a ``--model`` run is compared only with ``--model`` runs); None otherwise."""
    if not isinstance(old, dict) or old.get("schema") != doc.schema:
        return None
    if old.get("benchmark_schema") != doc.benchmark_schema or bool(old.get("geometries")) != bool(doc.geometries):
        return None
    return SeriesBench.from_doc(old)


#: {kind: how an earlier run's file reads (None: not a run of that benchmark)}: the project benchmark's
#: runs (suite.models.BenchRun), the series' benchmark's of the current schema and format.
READERS = {"bench": lambda old, doc, name: BenchRun.read(old, name),
           "series_bench": lambda old, doc, name: _same_series_format(old, doc)}  # fmt: skip


def repeats_view(
    base: Path, slug: str, docs: Mapping[str, Model], current: Mapping[str, dict[int, dict[str, Any]]]
) -> list[dict[str, Any]]:
    """Per benchmark: the current run (``current``: {kind: its decode ratios}) beside every earlier run of
    the SAME patched tree its writer kept in ``<device>/history/tree-<tree id>/`` (:func:`suite.results.history`,
    read by :data:`READERS`), decode regime, so run-to-run variation of the verdicts is on the page.
    Earlier runs in ``generated_at`` order."""
    out = []
    for kind, where in REPEAT_KINDS.items():
        doc = docs.get(kind)
        tree = doc.tree if doc else None
        if not tree:
            continue
        earlier = []
        for path in results.history(kind, slug, tree, base):
            name = path.relative_to(base).as_posix()
            old = READERS[kind](results.read_json(path), doc, name)
            if old is not None and old.tree == tree and old.generated_at != doc.generated_at:
                earlier.append((old.generated_at or "", name, old))
        if not earlier:
            continue
        current_file = getattr(doc, "store", None) or f"{slug}/{MEASUREMENTS[kind].file}"
        runs = [{"file": current_file, "at": doc.generated_at, "ratios": current[kind], "series": doc}] + [
            {"file": f, "at": at, "ratios": REPEAT_VIEWS[kind](old), "series": old} for at, f, old in sorted(earlier)]
        ns = sorted({n for r in runs for n in r["ratios"]})
        if getattr(doc, "geometries", None):  # a --model run: its first geometry's rows
            where = f"{where} ({doc.geometries[0].model}, its first geometry)"
        out.append({"kind": kind, "where": where, "tree": tree, "runs": runs, "ns": ns,
                    "header": ["run", "generated (UTC)"] + [f"n = {n}" for n in ns]})  # fmt: skip
    return out
