"""The typed models of the result documents other than the benchmark's store (kinds of :mod:`suite.results`).

Each model's fields are the keys its writer saves; what no field names stays in ``extra`` (a document
reads back whole). Every committed document names kernels in the switch's words (``upstream``,
``upstream_aa``, ``tma``, ``auto``); older shapes are read by each model's ``normalise`` (ratios of before
:class:`suite.stats.Comparison`) or were migrated once (:mod:`suite.migrate`).
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from typing import Any, Mapping

from suite.kernels import Kernel
from suite.models.base import Document, Model, field
from suite.models.paired import Paired, comparisons
from suite.stats import Comparison, verdict


@dataclasses.dataclass
class StepBreakdown(Model):
    """``step_pdl.json``'s decode step: the torch.profiler breakdown per kernel and the trace's miss figures."""

    breakdown: dict[str, dict[str, Any]] = field({})  # per kernel: calls, steps, mean_us, median_us, per_step_us
    zipf_exponent: float | None = None
    modelled_miss_rate: float | None = None
    cache_slots: int | None = None
    misses_per_step: float | None = None
    miss_stats: dict[str, Any] | None = None
    extra: dict[str, Any] = field({})

    OPTIONAL = ("miss_stats",)


@dataclasses.dataclass
class StepPdl(Document):
    args: dict[str, Any] = field({})
    decode_step: StepBreakdown | None = None
    per_layer: dict[str, Paired] = field({})  # per miss count n (a string)

    NESTED = {"decode_step": StepBreakdown, "per_layer": (dict, Paired)}


@dataclasses.dataclass
class Gpu(Document):
    """The GPU tier's summary (``conformance/gpu`` with ``CONFORMANCE_SUMMARY=1``)."""

    exitstatus: int | None = None
    passed: bool = False
    duration_s: float | None = None
    groups: dict[str, dict[str, Any]] = field({})  # per group: calls, bytes, tests (outcome counts)
    totals: dict[str, Any] = field({})  # verified_calls, verified_bytes, upstream_control_calls, tests
    failures: list[str] = field([])
    notes: dict[str, Any] = field({})
    default_ring: dict[str, int] | None = None
    extra_rings: list[dict[str, int]] = field([])
    command: str | None = None


@dataclasses.dataclass
class Sanitize(Document):
    """compute-sanitizer's tools over the sanitizer case (``python -m conformance.gpu.run_sanitizer``)."""

    sanitizer: str | None = None
    case: str | None = None
    tools: dict[str, dict[str, Any]] = field({})  # per tool: errors, warnings, hazards, exit_code, case_exact, ...
    sanitizer_version: str | None = None
    plain: dict[str, Any] | None = None
    total_errors: int | None = None
    passed: bool = False
    dry_run: bool | None = None

    OPTIONAL = ("sanitizer", "case", "sanitizer_version", "plain", "total_errors", "dry_run")


@dataclasses.dataclass
class E2EPoint(Model):
    """One slot-cache point of the end-to-end A/B: every kernel over its repeats, each against upstream."""

    slots: int
    target_miss_rate: float | None = None
    predicted_miss_rate: float | None = None
    kernels: dict[str, dict[str, Any]] = field({})  # per kernel: tokens/s over the repeats, miss rates, ...
    ratio: dict[str, Comparison] = field({})  # per kernel against upstream: tokens/s, the rule "repeats"
    ids_identical: bool | None = None
    miss_counts_identical: bool | None = None
    extra: dict[str, Any] = field({})

    NESTED = {"ratio": (dict, Comparison)}


@dataclasses.dataclass
class E2E(Document):
    """The end-to-end A/B (``python -m bench.e2e run``)."""

    model: dict[str, Any] = field({})
    settings: dict[str, Any] = field({})
    points: list[E2EPoint] = field([])
    ids_identical: bool | None = None
    complete: bool = False
    exit_code: int | None = None
    errors: list[Any] = field([])
    runs: list[dict[str, Any]] = field([])  # one per fresh process: repeat, point, kernel, tokens/s, ...

    NESTED = {"points": (list, E2EPoint)}


@dataclasses.dataclass
class AutoSummary(Model):
    runs: int | None = None
    chosen: list[str] = field([])
    chosen_again: list[str] = field([])
    counts: dict[str, int] = field({})
    same_every_time: bool | None = None
    default: str | None = None
    kept_default_every_time: bool | None = None
    probe_ms_min: float | None = None
    probe_ms_median: float | None = None
    probe_ms_max: float | None = None
    load_ms_max: float | None = None
    aa_spread_max: float | None = None
    cache_left_as_found: bool | None = None
    extra: dict[str, Any] = field({})


@dataclasses.dataclass
class AutoStability(Document):
    """What ``FREETOKEN_DECODE_GATHER=auto`` chose in fresh processes (``python -m bench.auto_stability``)."""

    settings: dict[str, Any] = field({})
    summary: AutoSummary = dataclasses.field(default_factory=AutoSummary)
    runs: list[dict[str, Any]] = field([])  # per process: choice, again (each a probe's choice), timings
    errors: list[str] = field([])

    NESTED = {"summary": AutoSummary}


@dataclasses.dataclass
class SeriesRow(Model):
    n: int
    regime: str = "replay"
    median_us: dict[str, float] = field({})
    rounds_us: dict[str, list[float]] = field({})
    aa_spread: float | None = None
    verified: int = 0
    ratio: dict[str, Comparison] = field({})  # upstream (default grid) / kernel, the series' figures and verdicts
    gbps: dict[str, float | None] = field({})
    extra: dict[str, Any] = field({})

    NESTED = {"ratio": (dict, Comparison)}

    @classmethod
    def normalise(cls, doc: dict[str, Any]) -> dict[str, Any]:
        """The series' row ({kernel: ratio}, ``verdict`` beside it) as Comparisons; no regime: ``replay``."""
        ratio = comparisons(doc)
        return {**doc, "ratio": ratio, "regime": doc.get("regime") or "replay"}


@dataclasses.dataclass
class SeriesGeometry(Model):
    """One model geometry of a ``--model`` run (benchmark schema ``/2``): its profile, bank rows and pinned
    layers (in ``extra``), its rows, what ``auto`` chose; ``skipped`` says why it has no rows."""

    model: str
    quant_format: str | None = None
    expert_bytes: int | None = None
    rows: list[SeriesRow] = field([])
    auto: dict[str, Any] | None = None
    skipped: str | None = None
    extra: dict[str, Any] = field({})

    NESTED = {"rows": (list, SeriesRow)}
    OPTIONAL = ("quant_format", "expert_bytes", "auto")


@dataclasses.dataclass
class SeriesBench(Document):
    """The series' own benchmark (``benchmarks/bench_decode_gather.py``) kept by ``python -m bench.series_bench``."""

    benchmark_schema: str | None = None
    args: dict[str, Any] = field({})
    decides: str | None = None
    geometries: list[SeriesGeometry] | None = None  # schema /2: one per --model geometry, each with its rows
    failures: list[Any] = field([])
    exit_code: int | None = None
    # schema /2: the default ring, the host, the verified counts ({replays, copies}), the ring sweep's choice
    # ({default, scores: {ring: {geomean, rows, wins, losses}}, best}) and the rings timed ({ring, load_s, error})
    tma_ring: str | None = None
    host: dict[str, Any] | None = None
    verified: dict[str, int] | None = None
    ring_choice: dict[str, Any] | None = None
    rings: list[dict[str, Any]] | None = None
    errors: list[Any] | None = None

    NESTED = {"geometries": (list, SeriesGeometry)}  # a run of schema /1 keeps its one geometry's rows in extra
    OPTIONAL = ("benchmark_schema", "decides", "exit_code", "geometries", "tma_ring", "host", "verified", "ring_choice",
                "rings", "errors")


def ring_choice(doc: Mapping[str, Any]) -> dict[str, Any] | None:
    """The ring sweep's choice over a ``series_bench`` document's rows, as the benchmark's schema ``/2`` recorded it
    (``/3`` records none: :mod:`bench.series_bench` stores this, :mod:`suite.migrate` adds it to older files): per
    ``tma_<ring>`` column, the geometric mean of tma's time / the ring's over the rows with misses and the rows where
    the ring is faster and slower than tma beyond the row's A/A spread (the rule ``aa``); ``best``: the fastest of
    the rings faster in at least one row and slower in none (most rows sit at the link ceiling, where every ring
    ties, so "faster in most" could pick none). None where no ring was timed."""
    rows = [r for g in doc.get("geometries") or [] for r in g.get("rows") or [] if r["n"] > 0]
    rings = [k for k in (rows[0]["median_us"] if rows else {}) if k.startswith(f"{Kernel.TMA}_")]
    if not rings:
        return None
    scores = {}
    for k in rings:
        gains = [r["median_us"][Kernel.TMA] / r["median_us"][k] for r in rows]
        said = [verdict(x, r["aa_spread"]) for x, r in zip(gains, rows)]
        scores[k[len(Kernel.TMA) + 1 :]] = {"geomean": math.exp(statistics.fmean(math.log(x) for x in gains)),
                                            "rows": len(rows), "wins": said.count("faster"),
                                            "losses": said.count("slower")}  # fmt: skip
    good = {k: s for k, s in scores.items() if s["losses"] == 0 and s["wins"] > 0}
    best = max(good, key=lambda k: good[k]["geomean"]) if good else None
    return {"default": doc.get("tma_ring"), "scores": scores, "best": best}


@dataclasses.dataclass
class SweepRow(Model):
    """One swept configuration: a TMA ring (ctas, stages, chunk_bytes) or an LDG grid (blocks_per_bank, threads)."""

    ctas: int | None = None
    stages: int | None = None
    chunk_bytes: int | None = None
    blocks_per_bank: int | None = None
    threads: int | None = None
    tag: str | None = None
    bytes_in_flight: int | None = None
    flat_gbps: float | None = None
    gather_gbps: float | None = None
    error: str | None = None
    extra: dict[str, Any] = field({})

    OPTIONAL = ("ctas", "stages", "chunk_bytes", "blocks_per_bank", "threads", "tag")


@dataclasses.dataclass
class SweepSummary(Model):
    """The copy engine's GB/s and the best of each path (each ``{config, gbps, bytes_in_flight, pct_of_copy_engine}``)."""

    copy_engine_gbps: float | None = None
    best_ring_flat_gbps: dict[str, Any] | None = None
    best_ring_gather_gbps: dict[str, Any] | None = None
    best_ldg_flat_gbps: dict[str, Any] | None = None
    best_ldg_gather_gbps: dict[str, Any] | None = None
    extra: dict[str, Any] = field({})

    OPTIONAL = ("best_ring_flat_gbps", "best_ring_gather_gbps", "best_ldg_flat_gbps", "best_ldg_gather_gbps")


@dataclasses.dataclass
class Sweep(Document):
    """The ceiling sweep (``python -m bench.sweep``)."""

    dry_run: bool = False
    synthetic: bool = False
    command: str | None = None
    flat: dict[str, Any] = field({})
    gather: dict[str, Any] = field({})
    copy_engine: list[dict[str, Any]] = field([])
    ldg: list[SweepRow] = field([])
    ring: list[SweepRow] = field([])
    skipped: list[dict[str, Any]] = field([])
    errors: dict[str, Any] = field({})
    summary: SweepSummary | None = None

    NESTED = {"ldg": (list, SweepRow), "ring": (list, SweepRow), "summary": SweepSummary}
    OPTIONAL = ("summary",)


@dataclasses.dataclass
class Contention(Document):
    """Two GPUs alone and together (``python -m bench.contention``)."""

    gpus: dict[str, dict[str, Any]] = field({})
    args: dict[str, Any] = field({})
    rows: list[dict[str, Any]] = field([])
    summary: list[dict[str, Any]] = field([])  # per GPU and kernel: alone, together, kept
    wrong_sets: int | None = None
