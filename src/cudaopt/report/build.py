"""report.html: one self-contained page per run directory, rebuilt with ``cudaopt report``.

The verdict is "go" only when the holdout cases passed verification, a replay beat the baseline
beyond noise, and the pilot pays back within the declared window; the page says which rule
decided. Verification and replay results are read from ``verify.json`` and ``replay.json`` in
the run directory when they exist.
"""

from __future__ import annotations

import difflib
from pathlib import Path

from pydantic import BaseModel

from ..config import RoiInputs
from ..errors import ExperimentError
from ..experiment import ExperimentLock
from ..insight.card import ProfileRecord
from ..record.dispatch_table import DispatchTable
from ..record.rundir import RunDir, write_atomic
from ..record.runs import load_run_experiment, model_calls, read_run_json
from ..record.files import Environment, History, ReplayOutcome, Roi, Summary, VerifyOutcome
from . import charts
from .roi import compute, roi_case


def verdict(verify: VerifyOutcome | None, replay: ReplayOutcome | None, roi: Roi | None) -> tuple[str, list[str]]:
    """("go" | "no-go", the reasons): every rule is listed, met or not."""
    reasons, go = [], True
    if verify is None:
        go = False
        reasons.append("holdout: not verified yet")
    elif verify.regressions:
        go = False
        reasons.append(f"holdout: regression on {', '.join(verify.regressions)} (slower than the baseline "
                       "beyond noise)")
    elif not verify.passed:
        go = False
        reasons.append("holdout: verification failed")
    else:
        timed = f", {len(verify.timed)} shape(s) timed, none slower than the baseline" if verify.timed else ""
        reasons.append(f"holdout: passed{timed}")
    if replay is None:
        go = False
        reasons.append("replay: not run yet")
    elif not replay.beats_baseline:
        go = False
        reasons.append("replay: the winner does not beat the baseline beyond noise")
    else:
        reasons.append("replay: beats the baseline beyond noise (geomean over the performance cases)")
    if replay and replay.slower_cases:
        reasons.append(f"note: slower than the baseline in every replay pair on {', '.join(replay.slower_cases)}")
    if roi is None or roi.payback_months is None:
        go = False
        reasons.append("payback: nothing saved, never pays back")
    elif not roi.fits_window:
        go = False
        reasons.append(f"payback: {roi.payback_months:.1f} months, longer than the window")
    else:
        reasons.append(f"payback: {roi.payback_months:.2f} months, within the window")
    return ("go" if go else "no-go"), reasons


def _optional(run: RunDir, name: str, model: type[BaseModel]):
    """A run's optional file (verify.json, replay.json, ...), validated; None when absent."""
    return read_run_json(run, name, model) if run.file(name).is_file() else None


def _diff(run: RunDir, attempt, parent) -> str:
    if attempt.source_file is None:
        return ""
    new = run.file(attempt.source_file).read_text().splitlines()
    if parent is None or parent.source_file is None:
        return ""
    old = run.file(parent.source_file).read_text().splitlines()
    return "\n".join(difflib.unified_diff(old, new, f"#{parent.id}", f"#{attempt.id}", lineterm="", n=2))


def _profiles(run: RunDir) -> list[dict]:
    """The bottleneck cards of the profiled attempts (``profiles/attempt-N.json``, from --use-nsight)."""
    paths = sorted(run.path.glob(RunDir.PROFILES), key=lambda p: int(p.stem.split("-")[1]))
    records = [read_run_json(run, str(p.relative_to(run.path)), ProfileRecord) for p in paths]
    return [{"why": r.why, **r.card.model_dump()} for r in records]


def run_roi(run: RunDir) -> RoiInputs:
    """The ROI inputs of the run's experiment (its ``roi`` section), or the defaults when the
    experiment can no longer be loaded (the report of an old run still builds)."""
    try:
        return load_run_experiment(run).roi
    except (ExperimentError, OSError):
        return RoiInputs()


def build(path: Path, roi_inputs: RoiInputs | None = None) -> Path:
    """Write ``report.html`` in the run directory ``path`` and return its path."""
    from jinja2 import Environment as Templates
    from jinja2 import PackageLoader, select_autoescape

    run = RunDir.open(path)
    summary = read_run_json(run, RunDir.SUMMARY, Summary)
    attempts = read_run_json(run, RunDir.HISTORY, History).attempts
    by_id = {a.id: a for a in attempts}
    env = _optional(run, RunDir.ENV, Environment)
    found = _optional(run, RunDir.LOCK, ExperimentLock)
    lock = found.model_dump(mode="json") if found else {}
    calls = model_calls(run)
    roi_inputs = roi_inputs or run_roi(run)
    roi = None
    timed = [c for c in summary.cases if c.baseline_median_us and c.best_median_us]
    if timed:
        name = roi_case(roi_inputs.case, {c.name: c.baseline_median_us for c in timed})
        target = next(c for c in timed if c.name == name)
        roi = compute(roi_inputs, target.name, target.baseline_median_us, target.best_median_us,
                      summary.totals.cost_usd, summary.totals.gpu_seconds)
    verify, replay = _optional(run, RunDir.VERIFY, VerifyOutcome), _optional(run, RunDir.REPLAY, ReplayOutcome)
    decision, reasons = verdict(verify, replay, roi)
    best = by_id.get(summary.best_attempt) if summary.best_attempt is not None else None
    roof_cases, peak_tflops, peak_gbps, roof_sources = [], None, None, {}
    for case in (best.cases if best else []):
        if case.roofline is not None and not case.roofline.error:
            roof = case.roofline.model_dump(exclude_none=True)
            shares = [(roof[f"{k}_pct"], k) for k in ("compute", "memory") if roof.get(f"{k}_pct") is not None]
            roof_cases.append({"name": case.name, **roof, "bounding_roof": max(shares, default=None)})
            peak_tflops, peak_gbps = roof.get("peak_tflops"), roof.get("peak_gbps")
            roof_sources = {"compute": roof.get("peak_tflops_from", "spec"),
                            "memory": roof.get("peak_gbps_from", "spec")}
    controls = [(c.name, c.controls) for c in (by_id[0].cases if 0 in by_id else []) if c.controls is not None]
    heatmap = run.file(RunDir.HEATMAP_SVG).read_text() if run.file(RunDir.HEATMAP_SVG).is_file() else ""
    rows = []
    for a in attempts:
        parent = by_id.get(a.parent) if a.parent is not None else None
        rows.append({"a": a, "diff": _diff(run, a, parent), "reason": (a.reason or "").strip()[:2000]})
    template = Templates(loader=PackageLoader("cudaopt.report", "templates"),
                           autoescape=select_autoescape(["html", "j2"])).get_template("report.html.j2")
    html = template.render(
        summary=summary, attempts=rows, env=env.model_dump(mode="json") if env else {}, lock=lock, calls=calls, roi=roi, roi_inputs=roi_inputs,
        decision=decision, reasons=reasons, verify=verify, replay=replay, best=best, profiles=_profiles(run),
        controls=controls,
        roof_by_case={c["name"]: c for c in roof_cases}, roof_sources=roof_sources,
        progress_svg=charts.progress([(a.id, a.score_us, a.status) for a in attempts]),
        roofline_svg=charts.roofline(roof_cases, peak_tflops, peak_gbps),
        heatmap_svg=heatmap[heatmap.index("<svg"):] if "<svg" in heatmap else "",
        shapes_svg=charts.shapes([c.model_dump() for c in verify.timed]) if verify else None,
        worst=verify.worst() if verify else [], dispatch=_optional(run, RunDir.DISPATCH, DispatchTable),
    )
    out = run.file(RunDir.REPORT)
    write_atomic(out, html)
    return out
