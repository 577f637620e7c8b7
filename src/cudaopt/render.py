"""Terminal tables for evaluation results."""

from __future__ import annotations

from rich.table import Table

from .evaluate import Evaluation

_STYLE = {"ok": "green", "timeout": "yellow", "implausible": "magenta"}


def evaluation_table(evaluation: Evaluation) -> Table:
    result = evaluation.candidate
    comp = result.compile
    title = f"{result.status.upper()}"
    if result.device:
        title += f" on {result.device.get('name', '?')} ({result.device.get('arch', '?')})"
    table = Table(title=title, title_justify="left")
    for column in ("case", "role", "outcome", "median µs", "p10–p90 µs", "vs reference", "regs", "spills"):
        table.add_column(column, justify="right" if column not in ("case", "role", "outcome") else "left")
    regs = str(comp.registers) if comp and comp.registers is not None else "-"
    spills = (
        f"{comp.spill_stores}/{comp.spill_loads}" if comp and comp.spill_stores is not None else "-"
    )
    for case in result.cases:
        outcome = case.status
        timing = case.timing
        speedup = evaluation.speedup(case.name)
        table.add_row(
            case.name,
            case.role,
            f"[{_STYLE.get(case.status, 'red')}]{outcome}[/]",
            f"{timing.median_us:.2f}" if timing else "-",
            f"{timing.p10_us:.2f}–{timing.p90_us:.2f}" if timing else "-",
            f"{speedup:.2f}×" if speedup else "-",
            regs,
            spills,
        )
    return table


def failure_lines(evaluation: Evaluation) -> list[str]:
    """One line per failed case (or for the whole kernel when it never ran), with the reason."""
    result = evaluation.candidate
    lines = [f"{c.name}: {c.status}: {' '.join(c.reason.split())}" for c in result.cases if c.status != "ok"]
    if not result.cases and not result.ok:
        lines.append(f"{result.status}: {result.reason.strip()}")
    return lines
