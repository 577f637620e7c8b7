"""What ``cudaopt check``, ``evaluate`` and ``optimize`` show: their tables and the live progress line."""

from __future__ import annotations

from rich.live import Live
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from .. import api
from .app import console as make_console
from .app import say

_STYLE = {"ok": "green", "timeout": "yellow", "implausible": "magenta"}


def evaluation_table(evaluation) -> Table:
    result = evaluation.candidate
    comp = result.compile
    title = f"{result.status.upper()}"
    if result.device:
        title += f" on {result.device.name or '?'} ({result.device.arch or '?'})"
    table = Table(title=title, title_justify="left")
    labels = next(([v.label for v in c.vendors] for c in result.cases if c.vendors), [])
    columns = ["case", "role", "outcome", "median µs", "p10–p90 µs", "vs reference"]
    for label in labels:
        columns += [f"{_short(label, labels)} µs", f"vs {_short(label, labels)}"]
    kernels = any(c.launch and c.launch.entry for c in result.cases)  # a case launched another entry
    for column in (*columns, "regs", "spills", *(["kernel"] if kernels else [])):
        table.add_column(column, justify="right" if column not in ("case", "role", "outcome") else "left")
    for case in result.cases:
        registers, stores, loads = comp.resources(case.launch.entry if case.launch else None) if comp else (None,) * 3
        regs = str(registers) if registers is not None else "-"
        spills = f"{stores}/{loads}" if stores is not None else "-"
        outcome = case.status
        timing = case.timing
        speedup = evaluation.speedup(case.name)
        cells = [
            case.name,
            case.role,
            f"[{_STYLE.get(case.status, 'red')}]{outcome}[/]",
            f"{timing.median_us:.2f}" if timing else "-",
            f"{timing.p10_us:.2f}–{timing.p90_us:.2f}" if timing else "-",
            f"{speedup:.2f}×" if speedup else "-",
        ]
        for i in range(len(labels)):
            cells += _vendor_cells(case, i)
        tier = f" ({case.launch.tier})" if case.launch and case.launch.tier else ""  # a tier table's row
        kernel = [((case.launch.entry if case.launch else None) or "(the entry)") + tier] if kernels else []
        table.add_row(*cells, regs, spills, *kernel)
    lines = [f"math: {api.math_text(comp)}"] if comp is not None else []  # read from the compiled code
    if labels:
        notes = [f"{c.name}: {v.label + ': ' if len(labels) > 1 else ''}{v.status}: {' '.join(v.reason.split())}"
                 for c in result.cases for v in c.vendors if v.status != "ok"]
        lines += [f"{_vendor_word(labels)}: {', '.join(labels)} (timed interleaved with the kernel)", *notes]
    if lines:
        table.caption = escape("\n".join(lines))
        table.caption_justify = "left"
    return table


def _vendor_word(labels: list[str]) -> str:
    return "vendor" if len(labels) == 1 else "vendors"


def _short(label: str, labels: list[str]) -> str:
    """A column heading: "vendor" for the only one, else its label."""
    return "vendor" if len(labels) == 1 else label


def _vendor_cells(case, index: int) -> list[str]:
    """A vendor's median and the kernel's speed-up over it; the vendor's outcome when it failed."""
    vendor = case.vendors[index] if index < len(case.vendors) else None
    if vendor is None:
        return ["-", "-"]
    if vendor.status != "ok" or vendor.timing is None:
        return [f"[red]{vendor.status}[/]", "-"]
    mine = case.timing.median_us if case.timing and case.status == "ok" else None
    return [f"{vendor.timing.median_us:.2f}", f"{vendor.timing.median_us / mine:.2f}×" if mine else "-"]


def failure_lines(evaluation) -> list[str]:
    """One line per failed case (or for the whole kernel when it never ran), with the reason."""
    result = evaluation.candidate
    lines = [f"{c.name}: {c.status}: {' '.join(c.reason.split())}" for c in result.cases if c.status != "ok"]
    if not result.cases and not result.ok:
        lines.append(f"{result.status}: {result.reason.strip()}")
    return lines


class OptimizeProgress:
    """Live status line for `cudaopt optimize`: attempt, phase, best so far, tokens and cost. It
    starts with the run's first attempt: the notices that come before (the strategy ``auto`` chose,
    research pages not fetched) are plain lines on standard error."""

    def __init__(self, console):
        self.state = {"attempt": "-", "phase": "starting", "best": None, "best_id": None, "tokens": 0, "cost": 0.0}
        self.console = console
        self.steps = 0  # the iterations (or tuner evaluations) the run may take, once the API says
        self.live = Live(self._render(), console=console, refresh_per_second=4, transient=True)
        self.started = False

    def __enter__(self) -> OptimizeProgress:
        return self

    def __exit__(self, *exc) -> None:
        if self.started:
            self.live.__exit__(*exc)

    def __call__(self, event) -> None:
        if isinstance(event, api.Notice):
            say(make_console(stderr=True), event.text)
            return
        if isinstance(event, api.StepProgress):
            self.steps = event.total or self.steps
        elif isinstance(event, api.AttemptStarted):
            self.state.update(attempt=event.id, phase=event.what)
        elif isinstance(event, api.PhaseProgress):
            self.state["phase"] = f"{event.phase} {event.case}".strip()
        elif isinstance(event, api.UsageProgress):
            self.state.update(tokens=event.tokens, cost=event.cost)
        elif isinstance(event, api.AttemptFinished):
            self.state.update(best=event.best, best_id=event.best_id, phase="done")
            score = f"{event.score:.2f} µs" if event.score else event.status
            self.console.print(f"attempt #{event.id}: {score}", highlight=False)
        if not self.started and isinstance(event, api.AttemptStarted):
            self.live.__enter__()
            self.started = True
        self.live.update(self._render())

    def _render(self):
        s = self.state
        best = f"{s['best']:.2f} µs (#{s['best_id']})" if s["best"] else "-"
        of = f" of {self.steps}" if self.steps else ""
        return Text(f"attempt {s['attempt']}{of} · {s['phase']} · best {best} · "
                    f"{s['tokens']} tokens · ${s['cost']:.4f}")


def summary_table(summary) -> Table:
    """Baseline vs best per case, with the score and the stop reason."""
    table = Table(title=f"{summary.run}: stopped ({summary.stop_reason})", title_justify="left")
    labels = [v.label for v in summary.vendors]
    columns = ["case", "role", "baseline µs", "best µs", "speed-up"]
    for label in labels:
        columns += [f"{_short(label, labels)} µs", f"vs {_short(label, labels)}"]
    for column in columns:
        table.add_column(column, justify="left" if column in ("case", "role") else "right")
    fmt = lambda v, spec: format(v, spec) if v is not None else "-"
    times = lambda v: f"{v:.2f}×" if v else "-"
    for case in summary.cases:
        cells = [case.name, case.role, fmt(case.baseline_median_us, ".2f"), fmt(case.best_median_us, ".2f"),
                 times(case.speedup)]
        for vendor in case.vendors:
            median = fmt(vendor.median_us, ".2f") if vendor.status in ("ok", None) else vendor.status
            cells += [median, times(vendor.speedup)]
        table.add_row(*cells)
    total = ["geomean (score)", "", fmt(summary.baseline_score_us, ".2f"), fmt(summary.best_score_us, ".2f"),
             times(summary.speedup)]
    for vendor in summary.vendors:
        total += [fmt(vendor.score_us, ".2f"), times(vendor.speedup)]
    lines = [f"baseline: {summary.baseline.removeprefix('vendor: ')} (no initial kernel)"] \
        if summary.baseline != "initial kernel" else []
    if labels:
        beside = "with the baseline" if summary.baseline == "initial kernel" else "with each other, as the baseline"
        lines.append(f"{_vendor_word(labels)}: {', '.join(labels)} (timed interleaved {beside})")
    if lines:
        table.caption = escape("\n".join(lines))
        table.caption_justify = "left"
    table.add_row(*total, style="bold")
    return table


def audit_line(summary) -> str:
    """The crowning audit in a line: the winner's checked timed launches and escape bound, the run's, the refused."""
    audit = summary.audit
    if audit.winner is None:
        text = "crowning audit: every candidate refused, no winner"
    else:
        timed = [audit.checked_launches_per_case.get(c.name, 0) for c in summary.cases if c.role == "performance"]
        text = (f"crowning audit: #{audit.winner} passed, {min(timed, default=0)}+ checked timed launches per "
                f"performance case; one wrong on half a case's timed launches passes with p ≤ "
                f"{100 * audit.escape_bound:.2g}%")
    refused = [f"#{a.attempt} ({a.status})" for a in audit.audits if a.status != "ok"]
    return text + f" (run: {100 * audit.run_escape_bound:.2g}%)" + (f"; refused {', '.join(refused)}" if refused else "")


def time_line(spent) -> str:
    """Where the run's time went, in the order it was spent; steps that took no time left out."""
    on_gpus = "" if spent.gpus == 1 else f" (on {spent.gpus} GPUs, summed)"
    steps = [("pre-flight", spent.preflight_s), ("workers started", spent.workers_s),
             ("checks" + on_gpus, spent.checks_s), ("timing", spent.timing_s),
             ("finalists measured again", spent.measured_again_s), ("crowning audit", spent.audit_s),
             ("host and compile waits", spent.other_s or 0.0)]
    parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in steps if seconds >= 0.05)
    compiled = f"; NVRTC {spent.compile_s:.1f} s of CPU beside them" if spent.compile_s >= 0.05 else ""
    return f"time {spent.wall_s:.1f} s: {parts}{compiled}"


def summary_lines(summary) -> list[str]:
    """What follows the summary table: usage, tunables, review flags, the ablation."""
    t = summary.totals
    lines = [f"{summary.attempts} attempts ({summary.valid} valid), {t.model_calls} model calls, "
             f"{t.input_tokens} input / {t.output_tokens} output tokens, ${t.cost_usd:.4f}, "
             f"GPU {t.gpu_seconds:.1f} s, wall {t.wall_seconds:.1f} s once the workers started"]
    if summary.time:
        lines.append(time_line(summary.time))
    if summary.best_defines:
        lines.append(f"best tunables: {summary.best_defines}")
    if summary.best_math:
        lines.append(f"best math: {summary.best_math}")
    lines += [f"review: {flag}" for flag in summary.review]
    if summary.finalists:
        f = summary.finalists
        scores = ", ".join(f"#{x.attempt} {x.score_us:.2f} µs" + (" (dropped after one round)" if x.dropped else "")
                           if x.score_us is not None else f"#{x.attempt} {x.status}" for x in f.finalists)
        lines.append(f"finalists measured again on {f.gpu.label} ({f.repeats}×): {scores}; winner "
                     f"{'#' + str(f.winner) if f.winner is not None else 'none'}")
    if summary.audit:
        lines.append(audit_line(summary))
    kb = summary.kernelbench
    if kb:
        ratio = lambda v: f"{v:.2f}×" if v else "-"
        lines.append(f"kernelbench: correct {'yes' if kb.correct else 'no'}, speed-up over PyTorch eager "
                     f"{ratio(kb.speedup_vs_eager)}, over torch.compile {ratio(kb.speedup_vs_compile)}")
    if summary.ablation:
        gain = summary.ablation["agent_gain_over_tuning"]
        lines.append(f"ablation: tuning alone reached {summary.ablation['tune_only_best_score_us']} µs; "
                     f"the agent added {gain:.2f}× beyond it" if gain else "ablation: no comparison")
    return lines


def check_table(done) -> Table:
    """``cudaopt check``: what was checked and what it found."""
    table = Table(title="cudaopt check: ready", title_justify="left")
    table.add_column("check")
    table.add_column("result")
    for item in done:
        table.add_row(item.what, item.detail)
    return table
