"""Return on investment of a kernel found by cudaopt: does the speed-up pay for the experiment?

pilot cost            = engineer hours x hourly rate + model charges + GPU hours x GPU hourly price
saved GPU hours/month = ms saved per call x calls per month / 3,600,000
payback (months)      = pilot cost / (saved GPU hours per month x GPU hourly price)
"""

from __future__ import annotations

from collections.abc import Mapping

from ..config import RoiInputs
from ..record.files import Roi


def roi_case(wanted: str | None, latencies: Mapping[str, float]) -> str | None:
    """The case whose latency the calls pay, among the timed performance cases in use (name ->
    latency): the one ``roi.case`` names, else the slowest; a named case missing there (the
    experiment runs on other cases) falls back to the slowest, and :func:`compute` says so."""
    if wanted in latencies:
        return wanted
    return max(latencies, key=latencies.__getitem__, default=None)


def fallback_note(inputs: RoiInputs, case: str) -> str | None:
    """Why the worksheet is on ``case`` when ``roi.case`` names another one."""
    if inputs.case is None or inputs.case == case:
        return None
    return (f"roi.case {inputs.case!r} is not a timed performance case here: the slowest one, {case!r}, "
            "pays the bill instead")


def compute(inputs: RoiInputs, case: str, baseline_us: float, best_us: float, model_cost_usd: float,
            gpu_seconds: float) -> Roi:
    ms_saved = max(0.0, (baseline_us - best_us) / 1000.0)
    engineer = inputs.engineer_hours * inputs.engineer_rate_usd
    gpu = gpu_seconds / 3600.0 * inputs.gpu_hour_usd
    pilot = engineer + model_cost_usd + gpu
    hours = ms_saved * inputs.calls_per_month / 3_600_000.0
    monthly = hours * inputs.gpu_hour_usd
    payback = pilot / monthly if monthly > 0 else None
    return Roi(
        case=case, baseline_ms=baseline_us / 1000.0, best_ms=best_us / 1000.0, ms_saved_per_call=ms_saved,
        engineer_cost_usd=engineer, model_cost_usd=model_cost_usd, gpu_cost_usd=gpu, pilot_cost_usd=pilot,
        saved_gpu_hours_per_month=hours, monthly_saving_usd=monthly, payback_months=payback,
        fits_window=payback is not None and payback <= inputs.payback_window_months,
        note=fallback_note(inputs, case),
    )
