"""What ``cudaopt doctor`` and ``peaks`` show."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table


def doctor_table(checks) -> Table:
    table = Table(title="cudaopt doctor", title_justify="left")
    for column in ("check", "status", "value", "what to do"):
        table.add_column(column)
    for check in checks:
        table.add_row(check.name, "[green]ok[/]" if check.ok else "[red]missing[/]", escape(check.value),
                      "" if check.ok else escape(check.fix))
    return table


def peaks_table(rows) -> Table:
    table = Table(title="peaks: spec vs measured", title_justify="left",
                  caption="spec FP32/FP64: matrix-unit rates (the speed-of-light floor's bound); measured: "
                          "a device-to-device copy and FMA kernels, best of 10", caption_justify="left")
    for column in ("peak", "unit", "spec", "measured", "measured / spec"):
        table.add_column(column, justify="left" if column in ("peak", "unit") else "right")
    for row in rows:
        table.add_row(row.name, row.unit, f"{row.spec:,.1f}", f"{row.measured:,.1f}", f"{row.measured / row.spec:.0%}")
    return table
