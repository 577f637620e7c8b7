"""Heatmap of a run: attempts x performance cases, latency relative to the baseline."""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path


@dataclass
class Row:
    label: str  # e.g. "#3 ok" or "#4 compile_error"
    ratios: list[float | None]  # median / baseline median per case; None where not timed
    failed: bool


def draw(rows: list[Row], cases: list[str], png: Path, svg: Path) -> None:
    """Write the heatmap to ``png`` and ``svg``. Failed attempts are grey, hatched and labelled."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from matplotlib.patches import Rectangle

    height = max(2.5, 0.45 * len(rows) + 1.5)
    width = max(5.0, 1.6 * len(cases) + 3.0)
    fig, ax = plt.subplots(figsize=(width, height))
    finite = [r for row in rows for r in row.ratios if r is not None and r > 0]
    spread = max([abs(math.log10(r)) for r in finite] + [0.05])
    norm = LogNorm(vmin=10 ** -spread, vmax=10 ** spread)
    cmap = plt.get_cmap("RdYlGn_r")
    for y, row in enumerate(rows):
        for x, ratio in enumerate(row.ratios):
            if row.failed or ratio is None:
                ax.add_patch(Rectangle((x, y), 1, 1, facecolor="#d0d0d0", hatch="//", edgecolor="white"))
                ax.text(x + 0.5, y + 0.5, "failed" if row.failed else "-", ha="center", va="center", fontsize=8)
            else:
                ax.add_patch(Rectangle((x, y), 1, 1, facecolor=cmap(norm(ratio)), edgecolor="white"))
                ax.text(x + 0.5, y + 0.5, f"{ratio:.2f}×", ha="center", va="center", fontsize=8)
    ax.set_xlim(0, len(cases))
    ax.set_ylim(len(rows), 0)
    ax.set_xticks([i + 0.5 for i in range(len(cases))], cases, rotation=20, ha="right", fontsize=8)
    ax.set_yticks([i + 0.5 for i in range(len(rows))], [r.label for r in rows], fontsize=8)
    ax.set_title("latency relative to the baseline (lower is faster)", fontsize=10)
    sm = plt.cm.ScalarMappable(norm=norm, cmap=cmap)
    fig.colorbar(sm, ax=ax, fraction=0.04, pad=0.02)
    fig.tight_layout()
    fig.savefig(png, dpi=120)
    fig.savefig(svg)
    plt.close(fig)
