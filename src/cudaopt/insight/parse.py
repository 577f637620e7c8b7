"""Reading ``ncu --csv --page raw`` output: one row of metric names, one of units, one per kernel.

ncu mixes its own messages (``==PROF==``, ``==WARNING==``, ``==ERROR==``) into the same output,
writes numbers with thousands separators, and leaves a cell empty when a metric does not exist on
the chip; such a metric is absent from the result, never zero.
"""

from __future__ import annotations

import csv
from dataclasses import dataclass, field

_NOT_A_VALUE = {"", "n/a", "N/A"}


@dataclass
class KernelMetrics:
    """The metrics of one profiled launch."""

    kernel: str
    values: dict[str, float | str] = field(default_factory=dict)
    units: dict[str, str] = field(default_factory=dict)

    def number(self, name: str) -> float | None:
        value = self.values.get(name)
        return value if isinstance(value, float) else None


def parse_raw_csv(text: str) -> list[KernelMetrics]:
    """Every profiled launch in ``text``, in order; an empty list when there is none."""
    lines = [line for line in text.splitlines() if line.strip() and not line.startswith("==")]
    rows = list(csv.reader(lines))
    start = next((i for i, row in enumerate(rows) if row and row[0] == "ID"), None)
    if start is None or start + 1 >= len(rows):
        return []
    header, units = rows[start], rows[start + 1]
    kernels = []
    for row in rows[start + 2:]:
        if len(row) != len(header):
            continue
        metrics = KernelMetrics(kernel=row[header.index("Kernel Name")] if "Kernel Name" in header else "")
        for name, unit, cell in zip(header, units, row, strict=True):
            value = _value(cell)
            if value is not None:
                metrics.values[name] = value
                if unit:
                    metrics.units[name] = unit
        kernels.append(metrics)
    return kernels


def _value(cell: str) -> float | str | None:
    cell = cell.strip()
    if cell in _NOT_A_VALUE:
        return None
    try:
        return float(cell.replace(",", ""))
    except ValueError:
        return cell
