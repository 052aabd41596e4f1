"""The benchmark's rows: what ``bench/test_bench_gather.py`` measured, per case, from its store.

The store is pytest-benchmark's own JSON (kind ``benchmark``): one record per (regime, layers, n, kernel),
params of those names, each record's ``extra_info["paired"]`` the case's :class:`~suite.models.paired.Paired`
result and the run-wide facts under the top-level ``decode_gather``. :meth:`BenchRun.read` turns such a
file into rows: per case the paired figures (which decide) and each kernel's pytest-benchmark statistics
(``benchmark``, per layer).
"""

from __future__ import annotations

import dataclasses
from typing import Any, Mapping

from suite.commands import MEASUREMENTS
from suite.kernels import Kernel
from suite.models.base import Model, field
from suite.models.paired import Paired
from suite.stats import Comparison

BENCHMARK_SCHEMA = MEASUREMENTS["bench"].schema


@dataclasses.dataclass
class CaseRow(Model):
    """One gather case (regime, layers, n): the paired medians and comparisons, GB/s, each kernel's statistics."""

    layers: int
    n: Any
    regime: str = "replay"
    bytes_per_layer: int = 0
    us: dict[str, float] = field({})  # paired medians, µs per layer
    ratio: dict[str, Comparison] = field({})  # per kernel against upstream (the case's Paired.ratio)
    gbps: dict[str, float | None] = field({})
    pct_of_ceiling: dict[str, float | None] = field({})
    benchmark: dict[str, dict[str, Any]] = field({})  # per kernel: pytest-benchmark's median, iqr, min, mean, rounds
    ceiling_gbps: float | None = None

    NESTED = {"ratio": (dict, Comparison)}


@dataclasses.dataclass
class StepRow(Model):
    """The captured decode step: per-step paired medians and ratios, the trace's miss figures, what auto chose."""

    layers: int
    bytes_per_step: int | None = None
    rounds: int | None = None
    us_per_step: dict[str, float] = field({})
    rounds_us: dict[str, list[float]] = field({})
    ratio: dict[str, Comparison] = field({})  # per kernel against upstream (the step's Paired.ratio)
    benchmark: dict[str, dict[str, Any]] = field({})  # per kernel, per step
    steps_per_round: int | None = None
    miss_rate: float | None = None
    misses_per_step: float | None = None
    zipf_exponent: float | None = None
    modelled_miss_rate: float | None = None
    cache_slots: int | None = None
    top_k: int | None = None
    batch: int | None = None
    ideal_copy_us_per_step: float | None = None
    auto_choice: dict[str, Any] = field({})
    note: str = ""

    NESTED = {"ratio": (dict, Comparison)}


def _per_kernel(kernels: Mapping[str, Mapping[str, Any]], layers: int) -> dict[str, dict[str, Any]]:
    """Each kernel's pytest-benchmark statistics in µs per layer (median, IQR, min, mean) and its rounds."""
    out = {}
    for k, b in kernels.items():
        s = b.get("stats") or {}
        out[k] = {f: s[f] / layers * 1e6 for f in ("median", "iqr", "min", "mean") if s.get(f) is not None}
        out[k]["rounds"] = s.get("rounds")
    return out


def records(pb: Mapping[str, Any]) -> dict[tuple, dict[str, Mapping[str, Any]]]:
    """``{(regime, layers, n): {kernel: record}}`` in the saved order; a record without the four params is
    refused (the store is this benchmark's, nothing else's)."""
    out: dict[tuple, dict[str, Mapping[str, Any]]] = {}
    for b in pb.get("benchmarks") or []:
        params = b.get("params") or {}
        missing = [p for p in ("regime", "layers", "n", "kernel") if p not in params]
        if missing:
            raise ValueError(f"benchmark {b.get('fullname')!r}: params {sorted(params)} lack {missing} "
                             "(not a record of bench/test_bench_gather.py)")  # fmt: skip
        out.setdefault((params["regime"], params["layers"], params["n"]), {})[params["kernel"]] = b
    return out


def _case(regime: str, layers: int, n: Any, kernels: Mapping[str, Mapping[str, Any]], ceiling: float | None) -> CaseRow:
    ex = next(iter(kernels.values())).get("extra_info") or {}
    p = Paired.from_doc(ex.get("paired") or {})
    per_layer = (ex.get("bytes") or 0) // max(1, layers)
    gbps = {k: (per_layer / (v * 1e-6) / 1e9 if v and per_layer else None) for k, v in p.median_us.items()}
    return CaseRow(
        regime=regime, layers=layers, n=n, bytes_per_layer=per_layer, us=dict(p.median_us), ratio=p.ratio,
        gbps=gbps, ceiling_gbps=ceiling,
        pct_of_ceiling={k: (100.0 * v / ceiling if v and ceiling else None) for k, v in gbps.items()},
        benchmark=_per_kernel(kernels, layers),
    )  # fmt: skip


def _step(kernels: Mapping[str, Mapping[str, Any]], layers: int) -> StepRow:
    ex = next(iter(kernels.values())).get("extra_info") or {}
    p = Paired.from_doc(ex.get("paired") or {})
    keep = {f.name for f in dataclasses.fields(StepRow)} & set(p.extra)
    return StepRow(
        layers=layers, bytes_per_step=ex.get("bytes"), rounds=p.rounds, us_per_step=p.median_us,
        rounds_us=p.rounds_us, ratio=p.ratio, benchmark=_per_kernel(kernels, 1),
        **{k: p.extra[k] for k in sorted(keep)},
    )  # fmt: skip


@dataclasses.dataclass
class BenchRun(Model):
    """A device's benchmark run as the report reads it: the rows and the run-wide facts."""

    schema: str | None = None
    store: str | None = None  # the file it was read from
    synthetic: bool = False
    generated_at: str | None = None
    machine: dict[str, Any] = field({})
    provenance: dict[str, Any] = field({})
    tma_default_ring: dict[str, int] | None = None
    upstream_kernel: dict[str, Any] = field({})
    geometry: dict[str, Any] = field({})
    ceiling: dict[str, Any] = field({})  # the copy-engine ceiling at the start and the end of the run
    method: dict[str, Any] = field({})
    verified: dict[str, Any] = field({})
    gather: list[CaseRow] = field([])
    decode_step: StepRow | None = None
    pytest_benchmark: str | None = None  # pytest-benchmark's version

    NESTED = {"gather": (list, CaseRow), "decode_step": StepRow}

    @classmethod
    def read(cls, doc: Mapping[str, Any] | None, store: str) -> BenchRun | None:
        """The rows of a pytest-benchmark run of the benchmark; None for any other document."""
        if not isinstance(doc, Mapping) or doc.get("schema") != BENCHMARK_SCHEMA:
            return None
        return cls.from_doc({**doc, "store": store})

    @classmethod
    def load(cls, slug: str, base: Any = None, docs: Mapping[str, Any] | None = None) -> BenchRun | None:
        """Device ``slug``'s rows, from its store under ``base`` (or from ``docs``, its documents already read)."""
        from suite import results

        doc = docs.get("bench") if docs is not None else results.load("bench", slug, base)
        return cls.read(doc, f"{slug}/{MEASUREMENTS['bench'].file}")

    @classmethod
    def normalise(cls, doc: dict[str, Any]) -> dict[str, Any]:
        return cls._from_pytest_benchmark(doc) if "benchmarks" in doc else doc  # pytest-benchmark's store

    @staticmethod
    def _from_pytest_benchmark(pb: Mapping[str, Any]) -> dict[str, Any]:
        info = pb.get("decode_gather") or {}
        ceiling = ((info.get("ceiling") or {}).get("start") or {}).get("gbps")
        gather, step = [], None
        for (regime, layers, n), kernels in records(pb).items():
            if regime == "step":
                step = _step(kernels, layers)
            else:
                gather.append(_case(regime, layers, n, kernels, ceiling))
        kernel = info.get("kernel") or {}
        return {
            "schema": pb.get("schema"), "store": pb.get("store"), "synthetic": bool(pb.get("synthetic")),
            "generated_at": pb.get("datetime"),
            "machine": {**((pb.get("machine_info") or {}).get("gpu") or {})}, "provenance": pb.get("provenance") or {},
            "tma_default_ring": kernel.get("tma_default_ring"), "upstream_kernel": kernel.get(Kernel.UPSTREAM) or {},
            "geometry": info.get("geometry") or {}, "ceiling": info.get("ceiling") or {},
            "method": info.get("method") or {}, "verified": info.get("verified") or {},
            "gather": gather, "decode_step": step, "pytest_benchmark": pb.get("version"),
        }  # fmt: skip
