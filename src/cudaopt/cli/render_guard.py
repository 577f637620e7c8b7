"""What ``cudaopt guard record`` and ``guard check`` show."""

from __future__ import annotations

from pathlib import Path

from rich.markup import escape
from rich.table import Table

from .render_cells import num

_VERDICT_STYLE = {"passed": "green", "within": "green", "improved": "green", "inconclusive": "yellow",
                  "skipped": "dim"}


def guard_table(check) -> Table:
    table = Table(title=escape(check.title()), title_justify="left")
    columns = ("case", "role", "verdict", "now µs", "before µs", "time change", f"{check.confidence:.0%} interval")
    for column in columns:
        table.add_column(column, justify="right" if "µs" in column or column == "time change" else "left")
    for case in check.cases:
        cells = case.cells()
        cells[2] = f"[{_VERDICT_STYLE.get(case.verdict, 'red')}]{case.verdict}[/]"
        table.add_row(*cells)
    return table


def guard_record_table(baseline, path: Path) -> Table:
    gpu = baseline.gpu
    table = Table(title=escape(f"guard recorded: {path} — {baseline.kernel.file} on {gpu.name or '?'} "
                               f"({gpu.arch or '?'}), driver {gpu.driver_version or gpu.driver_cuda_version or '?'}, "
                               f"{baseline.repeats} repeats"), title_justify="left")
    for column in ("case", "median µs", "repeats' medians µs", "p10–p90 µs (one repeat)", "vendor µs"):
        table.add_column(column, justify="left" if column == "case" else "right")
    for case in baseline.cases:
        table.add_row(case.name, num(case.median_us), " ".join(f"{v:.2f}" for v in case.medians_us),
                      f"{case.timing.p10_us:.2f}–{case.timing.p90_us:.2f}", num(case.vendor_median_us))
    table.caption = escape(f"checked: {', '.join(baseline.checked)} (seed {baseline.seed})")
    table.caption_justify = "left"
    return table
