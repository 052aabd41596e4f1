"""Old home of :func:`gpukit.results.provenance`, for ``bench/probes/`` until it is ported; delete then."""

from gpukit.results import provenance  # noqa: F401
