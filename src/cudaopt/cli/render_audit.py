"""What ``cudaopt audit`` shows."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from .render_cells import num


def audit_table(report) -> Table:
    """``cudaopt audit``: the fleet ranked by the estimated net return; with --optimize, what the runs found."""
    table = Table(title=f"fleet audit: {len(report.entries)} experiment(s), ranked by estimated return",
                  title_justify="left")
    columns = ["#", "experiment", "outcome", "kernel µs", "attainable µs", "headroom", "% of roof", "payback",
               "net USD"]
    columns += ["best µs", "speed-up", "run"] if report.plan else []
    for column in columns:
        table.add_column(column, justify="left" if column in ("experiment", "outcome", "run") else "right")
    for e in report.entries:
        h, roi, o = e.headroom, e.roi, e.optimized
        payback = "-" if roi is None else ("never" if roi.payback_months is None else f"{roi.payback_months:.2f} mo")
        measured = num(h.kernel_us if h else None) + (" (vendor)" if h and h.measured == "vendor" else "")
        cells = [str(e.rank), e.name, e.status, measured,
                 f"{h.attainable_us:.2f} ({h.basis})" if h else "-", f"{h.headroom:.2f}×" if h else "-",
                 f"{h.roofline_pct:.1f}% {h.bound}" if h and h.roofline_pct is not None else "-", payback,
                 num(e.net_usd)]
        if report.plan:
            cells += [num(o.best_us if o else None), f"{o.speedup:.2f}×" if o and o.speedup else "-",
                      o.run if o else e.note or "-"]
        table.add_row(*(escape(c) for c in cells))
    return table
