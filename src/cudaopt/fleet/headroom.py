"""How much an experiment's kernel could gain, and what that would return: the audit's estimate.

On the experiment's ROI case (its ``roi.case``, else the slowest performance case) the
attainable time is, in order of trust:

- ``vendor``: the vendor baseline's time, when it is faster: a kernel that fast exists;
- ``roofline``: the time at which the kernel would reach ``roof_target`` of its bounding roof
  (the larger of its compute and memory shares), when it is below that;
- ``none``: the kernel's own time: nothing shows that more is reachable.

An experiment without an initial kernel (a KernelBench import) has no kernel to measure: its
vendor is measured alone and is the time to beat, and its headroom is the vendor against the
roofline (``measured: "vendor"``): the time at ``roof_target`` of the bounding roof when the vendor
is below it, from the case's roofline where the worker gave one, else from the declared work and
the GPU's peaks (the measured ones, else the spec bandwidth).

The return uses report/roi.py's worksheet with the experiment's ``roi`` section, the attainable
time as the best time, and the engineer's time as the pilot's cost (no model or GPU cost is
known before a run); ``net_usd`` is the saving over the payback window minus that cost.
"""

from __future__ import annotations

from ..config import RoiInputs
from ..wire import expr
from ..worker.peaks import compute_class, roofline
from ..wire.protocol import CaseSpec
from ..wire.results import CaseResult, DeviceInfo, EvalResult, Roofline
from ..wire.signature import Signature
from ..record.files import Roi
from ..report.roi import compute, roi_case
from .files import Headroom


def _roi_case(cases: list[CaseResult], wanted: str | None, latency) -> CaseResult | None:
    """The timed performance case whose latency the calls pay (report/roi.py: ``roi_case``)."""
    timed = {c.name: c for c in cases if c.role == "performance" and latency(c) is not None}
    name = roi_case(wanted, {n: latency(c) for n, c in timed.items()})
    return timed[name] if name is not None else None


def estimate(result: EvalResult, inputs: RoiInputs, roof_target: float) -> Headroom | None:
    """The kernel's headroom on its ROI case; None when it failed or nothing was timed."""
    case = _roi_case(result.cases, inputs.case, lambda c: c.median_us) if result.ok else None
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


def estimate_vendor(result: EvalResult, cases: list[CaseSpec], signature: Signature, inputs: RoiInputs,
                    roof_target: float) -> Headroom | None:
    """The vendor's headroom on the ROI case of a vendor-only measurement; None when it was not timed."""
    case = _roi_case(result.cases, inputs.case, lambda c: c.vendor_median_us(0))
    if case is None or not result.ok:
        return None
    vendor = case.vendor_median_us(0)
    spec = next((c for c in cases if c.name == case.name), None)
    roof = case.roofline if case.roofline is not None and not case.roofline.error else \
        _roofline(vendor, spec, signature, result.device)
    shares = [(pct, name) for pct, name in ((roof.compute_pct, "compute"), (roof.memory_pct, "memory"))
              if pct is not None] if roof else []
    pct, bound = max(shares) if shares else (None, None)
    if pct is not None and 0 < pct < 100 * roof_target:
        attainable, basis = vendor * pct / (100 * roof_target), "roofline"
    else:
        attainable, basis = vendor, "none"
    return Headroom(case=case.name, measured="vendor", kernel_us=vendor, vendor_label=case.vendors[0].label,
                    vendor_us=vendor, vendor_speedup=1.0, roofline_pct=pct, bound=bound, attainable_us=attainable,
                    basis=basis, headroom=vendor / attainable)


def _roofline(median_us: float, case: CaseSpec | None, signature: Signature,
              device: DeviceInfo | None) -> Roofline | None:
    """The vendor's roofline from the case's declared work and the GPU's peaks, when both are known."""
    if case is None or device is None:
        return None
    try:
        flops = float(expr.evaluate(case.flops, case.scalars)) if case.flops is not None else None
        nbytes = float(expr.evaluate(case.bytes, case.scalars)) if case.bytes is not None else None
    except expr.ExprError:
        return None
    measured = device.measured_peaks
    peak_flops = measured.flops_per_s.get(compute_class(signature)) if measured else None
    peak_bytes = (measured.bytes_per_s if measured else None) or device.peak_bytes_per_s
    flops = flops if peak_flops else None
    nbytes = nbytes if peak_bytes else None
    if flops is None and nbytes is None:
        return None
    return roofline(median_us * 1e-6, flops, nbytes, spec_flops=peak_flops or 1.0, spec_bytes=peak_bytes or 1.0)


def returns(headroom: Headroom, inputs: RoiInputs) -> tuple[Roi, float]:
    """The estimated worksheet and the net return over the payback window."""
    roi = compute(inputs, headroom.case, headroom.kernel_us, headroom.attainable_us, model_cost_usd=0.0,
                  gpu_seconds=0.0)
    return roi, roi.monthly_saving_usd * inputs.payback_window_months - roi.pilot_cost_usd
