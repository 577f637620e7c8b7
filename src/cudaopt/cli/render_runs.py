"""What ``cudaopt replay`` and ``verify`` show."""

from __future__ import annotations

from rich.table import Table

from .render_cells import num


def replay_table(outcome) -> Table:
    table = Table(title="replay", title_justify="left")
    for column in ("case", "outcome", "recorded µs", "now µs", "within noise", "vs baseline", "beats baseline",
                   "vs vendor"):
        table.add_column(column)
    for c in outcome.cases:
        table.add_row(c.name, c.status, num(c.recorded_us), num(c.now_us),
                      "-" if c.within_noise is None else str(c.within_noise),
                      f"{c.speedup_vs_baseline:.2f}×" if c.speedup_vs_baseline else "-",
                      "-" if c.beats_baseline is None else str(c.beats_baseline),
                      f"{c.speedup_vs_vendor:.2f}×" if c.speedup_vs_vendor else "-")
    return table


def replay_lines(outcome) -> list[str]:
    return ([f"environment differs: {line}" for line in outcome.environment_differences]
            + [f"failed: {line}" for line in outcome.failures])


def verify_table(outcome) -> Table:
    table = Table(title=f"verify attempt #{outcome.attempt} (seed {outcome.seed}): "
                        f"{'PASSED' if outcome.passed else 'FAILED'}", title_justify="left")
    for column in ("case", "role", "outcome", "max abs error", "max rel error"):
        table.add_column(column)
    for c in outcome.cases:
        table.add_row(c.name, c.role, c.status, num(c.max_abs_error, ".3g"), num(c.max_rel_error, ".3g"))
    return table


def timed_table(outcome) -> Table:
    """The timed holdout cases and shapes: winner, baseline and vendor, and the regression verdict."""
    table = Table(title=f"timed beside the baseline and the vendor ({outcome.repeats} interleaved repeats)",
                  title_justify="left")
    columns = ["shape", "from", "winner µs", "baseline µs", "vendor µs", "vs baseline", "vs vendor", "verdict"]
    if outcome.dispatch:  # each shape ran its class's configuration (dispatch.json), the single winner beside it
        columns[2:3] = ["class", "winner µs", "single winner µs", "vs single"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("shape", "from", "class", "verdict") else "right")
    for c in outcome.timed:
        verdict = c.status if c.status != "ok" else (
            f"[red]regression[/] (> {c.margin:.0%} slower every repeat)" if c.regression else "ok")
        vendor = num(c.vendor_us) if c.vendor_us or not c.vendor_status else f"({c.vendor_status})"
        vs = [f"{x:.2f}×" if x else "-" for x in (c.speedup_vs_baseline, c.speedup_vs_vendor, c.speedup_vs_single)]
        cells = [c.name, c.origin, num(c.winner_us), num(c.baseline_us), vendor, vs[0], vs[1], verdict]
        if outcome.dispatch:
            cells[2:3] = [f"{c.dispatch_class or '-'} #{c.dispatch_attempt}", cells[2], num(c.single_us), vs[2]]
        table.add_row(*cells)
    return table


def verify_lines(outcome) -> list[str]:
    lines = [f"{c.name}: {' '.join(c.reason.split())}" for c in outcome.cases if c.status != "ok"]
    lines += [f"{c.name}: {c.status}: {' '.join(c.reason.split())}" for c in outcome.timed if c.status != "ok"]
    lines += [f"{c.name}: vendor {c.vendor_status}: {' '.join(c.vendor_reason.split())}"
              for c in outcome.timed if c.vendor_status]
    if outcome.regressions:
        lines.append(f"regressions (slower than the baseline beyond noise): {', '.join(outcome.regressions)}")
    worst = outcome.worst()
    if worst:
        lines.append("worst shapes: " + "; ".join(
            f"{c.name} {c.speedup_vs_baseline or c.speedup_vs_vendor:.2f}× vs "
            f"{'baseline' if c.speedup_vs_baseline else 'vendor'}" for c in worst))
    for tool in outcome.sanitize or []:
        detail = "no errors" if tool.passed else (
            f"{tool.errors} error(s)" if tool.errors else f"evaluation {tool.status}: {tool.reason}")
        lines.append(f"compute-sanitizer {tool.tool}: {'ok' if tool.passed else 'FAILED'} ({detail}); log: {tool.log}")
    return lines
