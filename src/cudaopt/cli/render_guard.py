"""What ``cudaopt guard record`` and ``guard check`` show (and the Markdown CI summary)."""

from __future__ import annotations

import statistics
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from ..guard.files import GuardBaseline, GuardCheck, GuardReport
from .render_cells import num

_VERDICT_STYLE = {"passed": "green", "within": "green", "improved": "green", "inconclusive": "yellow",
                  "skipped": "dim"}


def _change(ratio) -> str:
    return f"{(ratio - 1) * 100:+.1f}%" if ratio is not None else "-"


def _guard_row(case) -> list[str]:
    now = num(statistics.median(case.candidate_medians_us)) if case.candidate_medians_us else "-"
    before = num(statistics.median(case.baseline_medians_us)) if case.baseline_medians_us else "-"
    interval = f"{_change(case.ratio_low)} to {_change(case.ratio_high)}" if case.ratio_low is not None else "-"
    return [case.name, case.role, case.verdict, now, before, _change(case.ratio), interval]


def _guard_title(check: GuardCheck) -> str:
    how = "A/B in one worker" if check.mode == "ab" else "recorded figures"
    unit = "pairs" if check.mode == "ab" else "repeats"
    return (f"guard {check.file}: {'PASSED' if check.passed else 'FAILED'} — {check.kernel} against {check.against} "
            f"({how}, {check.repeats} {unit} per case, limit +{check.max_slowdown:.1%}, "
            f"{check.confidence:.0%} interval, seed {check.seed})")


def guard_table(check: GuardCheck) -> Table:
    table = Table(title=escape(_guard_title(check)), title_justify="left")
    columns = ("case", "role", "verdict", "now µs", "before µs", "time change", f"{check.confidence:.0%} interval")
    for column in columns:
        table.add_column(column, justify="right" if "µs" in column or column == "time change" else "left")
    for case in check.cases:
        cells = _guard_row(case)
        cells[2] = f"[{_VERDICT_STYLE.get(case.verdict, 'red')}]{case.verdict}[/]"
        table.add_row(*cells)
    return table


def guard_lines(check: GuardCheck) -> list[str]:
    """What follows a guard table: the score, why the GPU matters, notes, and each failure's figures."""
    lines = []
    if check.score_ratio is not None:
        lines.append(f"score (geomean over the timed cases): time {_change(check.score_ratio)} "
                     f"({_change(check.score_low)} to {_change(check.score_high)})")
    if check.environment_differences:
        what = ("the A/B comparison holds; the recorded figures would not" if check.mode == "ab" else
                "record the guard again on this GPU (cudaopt guard record) or compare A/B (--against, --against-ref)")
        lines.append(f"recorded on another GPU or driver ({'; '.join(check.environment_differences)}): {what}")
    lines += [f"note: {note}" for note in check.notes]
    lines += [f"{c.name}: {c.verdict}: {c.message}" for c in check.cases if c.failed or c.verdict == "inconclusive"]
    return lines


def guard_markdown(report: GuardReport) -> str:
    """A job summary (GitHub's $GITHUB_STEP_SUMMARY, a merge-request comment): one table per guard file."""
    cell = lambda text: str(text).replace("|", "\\|").replace("\n", " ")
    out = [f"## cudaopt guard: {'passed' if report.passed else 'FAILED'}", ""]
    for check in report.checks:
        gpu = check.gpu
        out += [cell(_guard_title(check)) + f" on {cell(gpu.name or '?')} ({gpu.arch or '?'}), driver "
                f"{gpu.driver_version or gpu.driver_cuda_version or '?'}", "",
                f"| case | role | verdict | now µs | before µs | time change | {check.confidence:.0%} interval |",
                "| --- | --- | --- | ---: | ---: | ---: | --- |"]
        for case in check.cases:
            cells = _guard_row(case)
            cells[2] = f"**{case.verdict}**" if case.failed else case.verdict
            out.append("| " + " | ".join(cell(c) for c in cells) + " |")
        out += [""] + [f"- {cell(line)}" for line in guard_lines(check)] + [""]
    return "\n".join(out).rstrip() + "\n"


def guard_record_table(baseline: GuardBaseline, path: Path) -> Table:
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
