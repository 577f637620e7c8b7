"""How much an experiment's kernel could gain, and what that would return: the audit's estimate.

On the experiment's ROI case (its ``roi.case``, else the slowest performance case) the
attainable time is, in order of trust:

- ``vendor``: the vendor baseline's time, when it is faster: a kernel that fast exists;
- ``roofline``: the time at which the kernel would reach ``roof_target`` of its bounding roof
  (the larger of its compute and memory shares), when it is below that;
- ``none``: the kernel's own time: nothing shows that more is reachable.

The return uses report/roi.py's worksheet with the experiment's ``roi`` section, the attainable
time as the best time, and the engineer's time as the pilot's cost (no model or GPU cost is
known before a run); ``net_usd`` is the saving over the payback window minus that cost.
"""

from __future__ import annotations

from ..config import RoiInputs
from ..harness.results import CaseResult, EvalResult
from ..record.fleet import Headroom
from ..record.schema import Roi
from .roi import compute


def roi_case(cases: list[CaseResult], wanted: str | None) -> CaseResult | None:
    """The case whose latency the calls pay: the one named, else the slowest timed performance case."""
    timed = [c for c in cases if c.role == "performance" and c.median_us is not None]
    return next((c for c in timed if c.name == wanted), None) or max(timed, key=lambda c: c.median_us, default=None)


def estimate(result: EvalResult, inputs: RoiInputs, roof_target: float) -> Headroom | None:
    """The kernel's headroom on its ROI case; None when it failed or nothing was timed."""
    case = roi_case(result.cases, inputs.case) if result.ok else None
    if case is None:
        return None
    kernel = case.median_us
    vendor = case.vendor_median_us(0)  # the experiment's first vendor
    roof = case.roofline if case.roofline is not None and not case.roofline.error else None
    shares = [(pct, name) for pct, name in ((roof.compute_pct, "compute"), (roof.memory_pct, "memory"))
              if pct is not None] if roof else []
    pct, bound = max(shares) if shares else (None, None)
    if vendor is not None and vendor < kernel:
        attainable, basis = vendor, "vendor"
    elif pct is not None and 0 < pct < 100 * roof_target:
        attainable, basis = kernel * pct / (100 * roof_target), "roofline"
    else:
        attainable, basis = kernel, "none"
    return Headroom(case=case.name, kernel_us=kernel, vendor_label=case.vendors[0].label if case.vendors else None,
                    vendor_us=vendor, vendor_speedup=kernel / vendor if vendor else None, roofline_pct=pct,
                    bound=bound, attainable_us=attainable, basis=basis, headroom=kernel / attainable)


def returns(headroom: Headroom, inputs: RoiInputs) -> tuple[Roi, float]:
    """The estimated worksheet and the net return over the payback window."""
    roi = compute(inputs, headroom.case, headroom.kernel_us, headroom.attainable_us, model_cost_usd=0.0,
                  gpu_seconds=0.0)
    return roi, roi.monthly_saving_usd * inputs.payback_window_months - roi.pilot_cost_usd
