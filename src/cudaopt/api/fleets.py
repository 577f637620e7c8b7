"""``audit``: a fleet of experiments ranked by what optimising each kernel would return (``cudaopt
audit``, docs/scale.md)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..errors import ExperimentError
from ..fleet.audit import Plan, load_fleet
from ..fleet.audit import audit as run_audit
from ..fleet.files import AuditReport, create_audit_dir
from ..paths import check_writable_folder
from ..pool.dispatch import Evaluator
from ..preflight import preflight
from ..record.events import Notice, OnProgress, StepProgress, ignore
from .arguments import check as check_arguments
from .arguments import path_of
from .experiments import PathArg
from .optimizing import check_model, model_settings, resolve_strategy
from .workers import Devices, chosen, workers


@dataclass(frozen=True)
class Audited:
    """A fleet audit: its report (``audit.json``) and the folder it was written to (``audit.html``
    and the runs of ``optimize`` beside it)."""

    report: AuditReport
    folder: Path


def audit(source: PathArg, *, out: PathArg | None = None, roof_target: float = 0.7, optimize: bool = False,
          top: int = 3, strategy: str = "auto", max_cost_usd: float | None = None, time_limit: float | None = None,
          max_iterations: int | None = None, max_evals: int = 40, model: str = "openai:gpt-5-mini",
          base_url: str | None = None, evaluator: Evaluator | None = None, device: int | None = None,
          devices: Devices = None, ray: str | None = None, on_progress: OnProgress = ignore) -> Audited:
    """Measure every experiment's kernel of ``source`` (a folder of experiments, or a list file)
    beside its vendor baseline (the vendor alone without an initial kernel), estimate its headroom
    and return, rank the fleet; with ``optimize``, run ``strategy`` on the ``top`` ones within one
    budget. An experiment that fails to load or its checks is its row's outcome; when none can be
    measured, that is bad input, said before any GPU work."""
    check_arguments({"roof_target": roof_target, "top": top, "max_cost_usd": max_cost_usd,
                     "time_limit": time_limit, "max_iterations": max_iterations, "max_evals": max_evals,
                     "model": model, "base_url": base_url, "device": device, "ray": ray})
    choice = chosen(device, devices, ray)
    fleet = path_of(source, "source", required=True)
    members = load_fleet(fleet)
    plan = None
    if optimize:
        settings = model_settings(model, base_url=base_url)
        name = resolve_strategy(strategy, settings, on_progress)
        if name != "tune":
            check_model(settings)
        plan = Plan(strategy=name, top=top, max_cost_usd=max_cost_usd, time_limit_s=time_limit,
                    max_iterations=max_iterations, settings=settings, options={"max_evals": max_evals})
    elif max_cost_usd is not None or time_limit is not None:
        raise ExperimentError("--max-cost-usd" if max_cost_usd is not None else "--time-limit", "",
                              "budgets the runs of --optimize; give --optimize too")
    folder = path_of(out, "out")
    if folder is not None and folder.exists() and (not folder.is_dir() or any(folder.iterdir())):
        raise ExperimentError("--out", "", f"{folder}: exists and is not an empty folder")
    if folder is not None:
        check_writable_folder(folder, "--out")
    on_progress(StepProgress(f"checking {len(members)} experiment(s)", 0, 0))
    for member in members:  # a member that fails its checks is its row's outcome, not the audit's end
        if not member.error:
            try:
                preflight(member.experiment)
            except ExperimentError as exc:
                member.error = str(exc)
    failed = [m for m in members if m.error]
    if len(failed) == len(members):  # nothing to measure: say why before any GPU work
        more = f" (and {len(failed) - 1} more kernel(s) that fail their checks)" if len(failed) > 1 else ""
        raise ExperimentError(fleet, "", f"no kernel of the fleet can be measured: {failed[0].error}{more}")
    with workers(choice, evaluator, on_progress) as pool:
        gpus = pool.gpus()  # the workers start before anything is written
        folder = folder or create_audit_dir(Path("results"))
        folder.mkdir(parents=True, exist_ok=True)
        on_progress(StepProgress(f"measuring {len(members)} kernel(s) on {len(gpus)} GPU(s)", 0, 0))
        report = run_audit(members, pool, folder, fleet, roof_target=roof_target, plan=plan,
                           on_line=lambda line: on_progress(Notice(line)))
    return Audited(report, folder)
