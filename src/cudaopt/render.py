"""Terminal tables for evaluation results."""

from __future__ import annotations

from rich.table import Table

from .evaluate import Evaluation

_STYLE = {"ok": "green", "timeout": "yellow", "implausible": "magenta"}


def _short(text: str, limit: int = 90) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 1] + "…"


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
        outcome = case.status if case.status == "ok" else f"{case.status}: {_short(case.reason)}"
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
