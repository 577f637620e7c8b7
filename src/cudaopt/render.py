"""Everything the CLI shows: tables for results, outcomes and checks, and the live progress line."""

from __future__ import annotations

import statistics
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from .evaluate import Evaluation
from .record.events import AttemptFinished, AttemptStarted, PhaseProgress, ProgressEvent, UsageProgress
from .record.guard_file import GuardBaseline, GuardCheck, GuardReport
from .record.schema import ReplayOutcome, VerifyOutcome

_STYLE = {"ok": "green", "timeout": "yellow", "implausible": "magenta"}


def evaluation_table(evaluation: Evaluation) -> Table:
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
        kernel = [(case.launch.entry if case.launch else None) or "(the entry)"] if kernels else []
        table.add_row(*cells, regs, spills, *kernel)
    if labels:
        notes = [f"{c.name}: {v.label + ': ' if len(labels) > 1 else ''}{v.status}: {' '.join(v.reason.split())}"
                 for c in result.cases for v in c.vendors if v.status != "ok"]
        lines = [f"{_vendor_word(labels)}: {', '.join(labels)} (timed interleaved with the kernel)", *notes]
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


def failure_lines(evaluation: Evaluation) -> list[str]:
    """One line per failed case (or for the whole kernel when it never ran), with the reason."""
    result = evaluation.candidate
    lines = [f"{c.name}: {c.status}: {' '.join(c.reason.split())}" for c in result.cases if c.status != "ok"]
    if not result.cases and not result.ok:
        lines.append(f"{result.status}: {result.reason.strip()}")
    return lines


class OptimizeProgress:
    """Live status line for `cudaopt optimize`: attempt, phase, best so far, tokens and cost."""

    def __init__(self, console, max_iterations: int):
        from rich.live import Live

        self.max = max_iterations
        self.state = {"attempt": "-", "phase": "starting", "best": None, "best_id": None, "tokens": 0, "cost": 0.0}
        self.console = console
        self.live = Live(self._render(), console=console, refresh_per_second=4, transient=True)

    def __enter__(self) -> OptimizeProgress:
        self.live.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.live.__exit__(*exc)

    def __call__(self, event: ProgressEvent) -> None:
        if isinstance(event, AttemptStarted):
            self.state.update(attempt=event.id, phase=event.what)
        elif isinstance(event, PhaseProgress):
            self.state["phase"] = f"{event.phase} {event.case}".strip()
        elif isinstance(event, UsageProgress):
            self.state.update(tokens=event.tokens, cost=event.cost)
        elif isinstance(event, AttemptFinished):
            self.state.update(best=event.best, best_id=event.best_id, phase="done")
            score = f"{event.score:.2f} µs" if event.score else event.status
            self.console.print(f"attempt #{event.id}: {score}", highlight=False)
        self.live.update(self._render())

    def _render(self):
        from rich.text import Text

        s = self.state
        best = f"{s['best']:.2f} µs (#{s['best_id']})" if s["best"] else "-"
        return Text(f"attempt {s['attempt']} of {self.max} · {s['phase']} · best {best} · "
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


def summary_lines(summary) -> list[str]:
    """What follows the summary table: usage, tunables, review flags, the ablation."""
    t = summary.totals
    lines = [f"{summary.attempts} attempts ({summary.valid} valid), {t.model_calls} model calls, "
             f"{t.input_tokens} input / {t.output_tokens} output tokens, ${t.cost_usd:.4f}, "
             f"GPU {t.gpu_seconds:.1f} s, wall {t.wall_seconds:.1f} s"]
    if summary.best_defines:
        lines.append(f"best tunables: {summary.best_defines}")
    lines += [f"review: {flag}" for flag in summary.review]
    if summary.finalists:
        f = summary.finalists
        scores = ", ".join(f"#{x.attempt} {x.score_us:.2f} µs" if x.score_us is not None else f"#{x.attempt} {x.status}"
                           for x in f.finalists)
        lines.append(f"finalists measured again on {f.gpu.label} ({f.repeats}×): {scores}; winner "
                     f"{'#' + str(f.winner) if f.winner is not None else 'none'}")
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


def _num(value, spec: str = ".2f") -> str:
    return format(value, spec) if isinstance(value, (int, float)) else "-"


def replay_table(outcome: ReplayOutcome) -> Table:
    table = Table(title="replay", title_justify="left")
    for column in ("case", "outcome", "recorded µs", "now µs", "within noise", "vs baseline", "beats baseline",
                   "vs vendor"):
        table.add_column(column)
    for c in outcome.cases:
        table.add_row(c.name, c.status, _num(c.recorded_us), _num(c.now_us),
                      "-" if c.within_noise is None else str(c.within_noise),
                      f"{c.speedup_vs_baseline:.2f}×" if c.speedup_vs_baseline else "-",
                      "-" if c.beats_baseline is None else str(c.beats_baseline),
                      f"{c.speedup_vs_vendor:.2f}×" if c.speedup_vs_vendor else "-")
    return table


def replay_lines(outcome: ReplayOutcome) -> list[str]:
    return ([f"environment differs: {line}" for line in outcome.environment_differences]
            + [f"failed: {line}" for line in outcome.failures])


def verify_table(outcome: VerifyOutcome) -> Table:
    table = Table(title=f"verify attempt #{outcome.attempt} (seed {outcome.seed}): "
                        f"{'PASSED' if outcome.passed else 'FAILED'}", title_justify="left")
    for column in ("case", "role", "outcome", "max abs error", "max rel error"):
        table.add_column(column)
    for c in outcome.cases:
        table.add_row(c.name, c.role, c.status, _num(c.max_abs_error, ".3g"), _num(c.max_rel_error, ".3g"))
    return table


def timed_table(outcome: VerifyOutcome) -> Table:
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
        vendor = _num(c.vendor_us) if c.vendor_us or not c.vendor_status else f"({c.vendor_status})"
        vs = [f"{x:.2f}×" if x else "-" for x in (c.speedup_vs_baseline, c.speedup_vs_vendor, c.speedup_vs_single)]
        cells = [c.name, c.origin, _num(c.winner_us), _num(c.baseline_us), vendor, vs[0], vs[1], verdict]
        if outcome.dispatch:
            cells[2:3] = [f"{c.dispatch_class or '-'} #{c.dispatch_attempt}", cells[2], _num(c.single_us), vs[2]]
        table.add_row(*cells)
    return table


def verify_lines(outcome: VerifyOutcome, run_dir: Path) -> list[str]:
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
        lines.append(f"compute-sanitizer {tool.tool}: {'ok' if tool.passed else 'FAILED'} ({detail}); "
                     f"log: {run_dir / 'sanitize' / ('sanitize-' + tool.tool + '.log')}")
    return lines


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


# --- cudaopt guard ---------------------------------------------------------------------------

_VERDICT_STYLE = {"passed": "green", "within": "green", "improved": "green", "inconclusive": "yellow",
                  "skipped": "dim"}


def _change(ratio) -> str:
    return f"{(ratio - 1) * 100:+.1f}%" if ratio is not None else "-"


def _guard_row(case) -> list[str]:
    now = _num(statistics.median(case.candidate_medians_us)) if case.candidate_medians_us else "-"
    before = _num(statistics.median(case.baseline_medians_us)) if case.baseline_medians_us else "-"
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
        table.add_row(case.name, _num(case.median_us), " ".join(f"{v:.2f}" for v in case.medians_us),
                      f"{case.timing.p10_us:.2f}–{case.timing.p90_us:.2f}", _num(case.vendor_median_us))
    table.caption = escape(f"checked: {', '.join(baseline.checked)} (seed {baseline.seed})")
    table.caption_justify = "left"
    return table


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
        measured = _num(h.kernel_us if h else None) + (" (vendor)" if h and h.measured == "vendor" else "")
        cells = [str(e.rank), e.name, e.status, measured,
                 f"{h.attainable_us:.2f} ({h.basis})" if h else "-", f"{h.headroom:.2f}×" if h else "-",
                 f"{h.roofline_pct:.1f}% {h.bound}" if h and h.roofline_pct is not None else "-", payback,
                 _num(e.net_usd)]
        if report.plan:
            cells += [_num(o.best_us if o else None), f"{o.speedup:.2f}×" if o and o.speedup else "-",
                      o.run if o else e.note or "-"]
        table.add_row(*(escape(c) for c in cells))
    return table


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
