"""The ceiling sweep's figure (``python -m bench.sweep`` writes it beside sweep.json): GB/s heatmaps of
the TMA rings over CTAs x ring shape, flat and NVFP4 gather, and GB/s against bytes in flight for rings
and LDG grids, with the copy-engine ceiling; a synthetic (``--dry-run``) document says so in the title."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from suite.geometry import fmt_bytes
from suite.results import machine_line


def render_png(doc: dict[str, Any], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except Exception as e:
        return f"matplotlib unavailable ({e}): no PNG"
    rings = [r for r in doc["ring"] if r.get("flat_gbps") is not None or r.get("gather_gbps") is not None]
    ctas = sorted({r["ctas"] for r in rings})
    shapes = sorted({(r["stages"], r["chunk_bytes"]) for r in rings}, key=lambda s: (s[0] * s[1], s))
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.2))
    vmax = max([r.get(k) or 0 for r in rings for k in ("flat_gbps", "gather_gbps")] + [1])
    for ax, key, title in ((axes[0], "flat_gbps", "TMA ring, flat (1 MiB rows)"),
                           (axes[1], "gather_gbps", "TMA ring, NVFP4 gather")):
        grid = [[math.nan for _ in ctas] for _ in shapes]
        for r in rings:
            v = r.get(key)
            if v is not None:
                grid[shapes.index((r["stages"], r["chunk_bytes"]))][ctas.index(r["ctas"])] = v
        im = ax.imshow(grid, aspect="auto", origin="lower", cmap="viridis", vmin=0, vmax=vmax)
        ax.set_xticks(range(len(ctas)), [str(c) for c in ctas])
        ax.set_yticks(range(len(shapes)), [f"{s}x{fmt_bytes(c)}" for s, c in shapes])
        ax.set(xlabel="CTAs", ylabel="stages x chunk (--per-cta)", title=title)
        for i, row in enumerate(grid):
            for j, v in enumerate(row):
                if not math.isnan(v):
                    ax.text(j, i, f"{v:.0f}", ha="center", va="center", color="w" if v < 0.6 * vmax else "k",
                            fontsize=8)  # fmt: skip
        fig.colorbar(im, ax=ax, label="GB/s")
    ax = axes[2]
    series = (("ring flat", rings, "flat_gbps", "o"), ("ring gather", rings, "gather_gbps", "s"),
              ("LDG flat", doc["ldg"], "flat_gbps", "^"), ("LDG gather", doc["ldg"], "gather_gbps", "v"))
    for label, rows, key, marker in series:
        pts = sorted((r["bytes_in_flight"], r[key]) for r in rows if r.get(key) is not None)
        if pts:
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker, label=label, alpha=0.8)
    ce = max((r["gbps"] for r in doc["copy_engine"]), default=None)
    if ce:
        ax.axhline(ce, color="k", ls="--", lw=1, label=f"copy engine {ce:.1f} GB/s")
    ax.set_xscale("log", base=2)
    ax.set(xlabel="bytes in flight", ylabel="GB/s", title="GB/s vs bytes in flight")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    m = doc.get("machine") or {}
    synthetic = "SYNTHETIC (--dry-run): not a measurement. " if doc.get("synthetic") else ""
    fig.suptitle(synthetic + (machine_line(m) if m else ""), fontsize=9)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return None
