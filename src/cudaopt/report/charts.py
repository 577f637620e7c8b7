"""Charts for the HTML report, as inline SVG text (the report must work offline)."""

from __future__ import annotations

import io


def _svg(fig) -> str:
    import matplotlib.pyplot as plt

    buffer = io.StringIO()
    fig.savefig(buffer, format="svg", bbox_inches="tight")
    plt.close(fig)
    text = buffer.getvalue()
    return text[text.index("<svg"):]  # drop the XML prologue so it can sit inside HTML


def _figure(width: float = 6.5, height: float = 3.2):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt.subplots(figsize=(width, height))


def progress(points: list[tuple[int, float | None, str]]) -> str:
    """Score per attempt (geomean µs, log scale), best so far as a step line, failures marked."""
    fig, ax = _figure()
    ok = [(i, s) for i, s, _ in points if s is not None]
    failed = [i for i, s, _ in points if s is None]
    if ok:
        ax.plot([i for i, _ in ok], [s for _, s in ok], "o", color="#1f77b4", label="passed")
        best, line = float("inf"), []
        for i, s, _ in points:
            if s is not None:
                best = min(best, s)
            line.append((i, best if best < float("inf") else None))
        xs = [i for i, b in line if b is not None]
        ax.step(xs, [b for _, b in line if b is not None], where="post", color="#2ca02c", label="best so far")
        top = max(s for _, s in ok)
        if min(s for _, s in ok) == top:  # every score the same: a range around it, or the log axis is empty
            ax.set_ylim(top / 1.5, top * 1.5)
        ax.set_yscale("log")
        ax.plot(failed, [top * 1.15] * len(failed), "x", color="#d62728", label="failed")
    elif failed:  # nothing to score: the failures alone, on one line
        ax.plot(failed, [0] * len(failed), "x", color="#d62728", label="failed (no attempt passed)")
        ax.set_yticks([])
    from matplotlib.ticker import MaxNLocator

    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel("attempt")
    ax.set_ylabel("score: geomean of medians (µs)")
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=8)
    ax.grid(alpha=0.3)
    return _svg(fig)


def roofline(cases: list[dict], peak_tflops: float | None, peak_gbps: float | None) -> str | None:
    """Achieved TFLOP/s against arithmetic intensity for each case, under the two roofs."""
    points = [c for c in cases if c.get("flops") and c.get("bytes") and c.get("achieved_tflops")]
    if not points or not peak_tflops or not peak_gbps:
        return None
    fig, ax = _figure()
    intensities = [c["flops"] / c["bytes"] for c in points]
    lo, hi = min(intensities) / 4, max(intensities) * 4
    ridge = peak_tflops * 1e12 / (peak_gbps * 1e9)
    xs = [lo, min(max(ridge, lo), hi), hi]
    ax.plot(xs, [min(peak_tflops, x * peak_gbps / 1e3) for x in xs], color="#444", label="roof (peak)")
    for c, x in zip(points, intensities, strict=True):
        ax.plot([x], [c["achieved_tflops"]], "o")
        ax.annotate(c["name"], (x, c["achieved_tflops"]), fontsize=7, xytext=(4, 4), textcoords="offset points")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("arithmetic intensity (FLOP/byte, declared work)")
    ax.set_ylabel("TFLOP/s")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return _svg(fig)


def shapes(cases: list[dict]) -> str | None:
    """Speed-up of the winner on each timed shape: over the baseline and over the vendor (log scale,
    1× marked); regressions in red."""
    rows = [c for c in cases if c.get("speedup_vs_baseline") or c.get("speedup_vs_vendor")]
    if not rows:
        return None
    fig, ax = _figure(width=6.5, height=max(2.0, 0.32 * len(rows) + 0.8))
    ys = list(range(len(rows)))
    base = [c.get("speedup_vs_baseline") or 0 for c in rows]
    vendor = [c.get("speedup_vs_vendor") or 0 for c in rows]
    colours = ["#d62728" if c.get("regression") else "#1f77b4" for c in rows]
    ax.barh([y - 0.2 for y in ys], base, height=0.38, color=colours, label="vs baseline")
    ax.barh([y + 0.2 for y in ys], vendor, height=0.38, color="#ff7f0e", label="vs vendor")
    ax.axvline(1.0, color="#444", linewidth=1)
    ax.set_yticks(ys, [c["name"] for c in rows], fontsize=7)
    ax.invert_yaxis()
    ax.set_xscale("log")
    ax.set_xlabel("speed-up of the winner (× faster; below 1: slower)")
    ax.grid(alpha=0.3, axis="x", which="both")
    ax.legend(fontsize=8)
    return _svg(fig)


BASIS_COLOURS = {"vendor": "#1f77b4", "roofline": "#ff7f0e", "none": "#999999"}


def headroom(rows: list[tuple[str, float, str, float | None]]) -> str | None:
    """A fleet's headroom, one bar per experiment in rank order: (name, headroom ×, basis, roofline %)."""
    if not rows:
        return None
    fig, ax = _figure(6.5, max(1.6, 0.45 * len(rows) + 0.8))
    names = [r[0] for r in rows][::-1]
    values = [r[1] for r in rows][::-1]
    colours = [BASIS_COLOURS[r[2]] for r in rows][::-1]
    ax.barh(names, values, color=colours)
    for y, (value, pct) in enumerate(zip(values, [r[3] for r in rows][::-1], strict=True)):
        label = f"{value:.2f}×" + (f"  ({pct:.0f}% of roof)" if pct is not None else "")
        ax.annotate(label, (value, y), xytext=(4, 0), textcoords="offset points", va="center", fontsize=8)
    ax.axvline(1.0, color="#444", linewidth=0.8)
    ax.set_xlim(0, max(values) * 1.35)
    ax.set_xlabel("headroom: kernel time / attainable time")
    from matplotlib.patches import Patch

    ax.legend(handles=[Patch(color=c, label=f"attainable: {b}") for b, c in BASIS_COLOURS.items()], fontsize=7,
              loc="lower right")
    ax.grid(alpha=0.3, axis="x")
    return _svg(fig)
