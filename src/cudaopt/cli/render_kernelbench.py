"""What ``cudaopt fast-p`` shows."""

from __future__ import annotations

from rich.table import Table


def fast_p_tables(report) -> list[Table]:
    """``cudaopt fast-p``: each run as KernelBench counts it, then fast_p per threshold."""
    runs = Table(title=f"runs ({len(report.runs)})", title_justify="left")
    for column in ("run", "correct", "verified", "vs eager", "vs torch.compile", "checks"):
        runs.add_column(column, justify="left" if column in ("run", "checks") else "right")
    times = lambda v: f"{v:.2f}×" if v else "-"
    for r in report.runs:
        checks = {"kernelbench": "KernelBench's", "changed": f"stricter ({len(r.changes)} changes)"}.get(r.checks, "-")
        runs.add_row(r.run, "yes" if r.correct else "no", "-" if r.verified is None else str(r.verified),
                     times(r.speedup_vs_eager), times(r.speedup_vs_compile), checks)
    fast = Table(title=f"fast_p over {report.baseline}", title_justify="left")
    for column in ("p", "fast_p", "runs"):
        fast.add_column(column, justify="right")
    for f in report.fast_p:
        fast.add_row(f"{f.threshold:g}", f"{f.fraction:.3f}", f"{f.count} of {len(report.runs)}")
    return [runs, fast]
