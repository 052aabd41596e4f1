"""Typed models of the result documents (:mod:`suite.results`), shared by their writers and the report
(stdlib only). ``Model.from_doc(dict)`` reads a document (older shapes normalised there, and only
there); ``model.to_doc()`` is the JSON a writer saves.

- :mod:`suite.models.paired`: :class:`Paired`, one case's paired-rounds result, and :func:`paired`
- :mod:`suite.models.bench`: :class:`BenchRun`, the benchmark's rows (:class:`CaseRow`, :class:`StepRow`)
- :mod:`suite.models.docs`: step_pdl, conformance, sanitizer, e2e, auto_stability, series_bench, ceiling, contention
"""

from suite.commands import MEASUREMENTS
from suite.models.base import Document, Model
from suite.models.bench import BenchRun, CaseRow, StepRow
from suite.models.docs import (AutoStability, AutoSummary, Contention, E2E, E2EPoint, Gpu, Sanitize, SeriesBench,
                               SeriesGeometry, SeriesRow, StepBreakdown, StepPdl, Sweep, SweepRow,
                               SweepSummary)  # fmt: skip
from suite.models.paired import Paired, paired

#: the model of each measurement of :data:`suite.commands.MEASUREMENTS` that has one (``Measurement.model``)
MODELS = {m.name: globals()[m.model] for m in MEASUREMENTS.values() if m.model}

__all__ = ["MODELS", "AutoStability", "AutoSummary", "BenchRun", "CaseRow", "Sweep", "SweepRow", "SweepSummary",
           "Gpu", "Contention", "Document", "E2E", "E2EPoint", "Model", "Paired", "Sanitize", "SeriesBench",
           "SeriesGeometry", "SeriesRow", "StepBreakdown", "StepPdl", "StepRow", "paired"]  # fmt: skip
