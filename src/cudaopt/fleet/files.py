"""``audit.json``: a fleet audit's experiments, ranked by what optimising each is estimated to return.

``cudaopt audit`` writes it (fleet/audit.py) in ``results/audit-NNN/`` beside ``audit.html``, and
again after each optimisation run it starts, so an interrupted audit keeps what it found.

Version 2 added ``Headroom.measured``: an experiment without an initial kernel (a KernelBench
import) has its vendor measured alone, and its headroom is the vendor against the roofline.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field

from ..pool.dispatch import GpuRef
from ..wire.protocol import WireModel
from ..record.runs import Budget
from ..record.files import Roi
from ..wire.fields import version_field

_AUDIT = re.compile(r"audit-(\d{3,})$")


class Headroom(WireModel):
    """How far a kernel is from what is known to be reachable, on its experiment's ROI case."""

    case: str
    measured: Literal["kernel", "vendor"] = "kernel"  # vendor: no initial kernel, the vendor is the bar
    kernel_us: float  # the time measured: the kernel's, or (measured "vendor") the vendor's
    vendor_label: str | None = None
    vendor_us: float | None = None
    vendor_speedup: float | None = None  # kernel / vendor time: above 1, the vendor shows the way
    roofline_pct: float | None = None  # the kernel's share of its bounding roof
    bound: Literal["compute", "memory"] | None = None
    attainable_us: float  # the estimate: the vendor's time when faster, else the time at the roof target
    basis: Literal["vendor", "roofline", "none"]
    headroom: float  # kernel / attainable time (1: nothing to gain found)


class OptimizedRun(WireModel):
    """The optimisation run an audit started for one experiment, and what it returned."""

    run: str  # the run directory, relative to the audit folder
    report: str  # its report.html, relative to the audit folder
    strategy: str
    budget: Budget
    stop_reason: str
    baseline_us: float | None = None  # the ROI case, in the run's baseline
    best_us: float | None = None  # the ROI case, in the run's best attempt
    speedup: float | None = None  # of the run's score
    cost_usd: float = 0.0
    gpu_seconds: float = 0.0
    wall_seconds: float = 0.0
    roi: Roi | None = None  # realised: from the measured best


class AuditEntry(WireModel):
    rank: int
    name: str
    config: str
    status: str  # the kernel's evaluation outcome: "ok", a harness outcome, or "bad_input" (not measured)
    reason: str = ""
    gpu: GpuRef | None = None
    headroom: Headroom | None = None  # None: the kernel failed, or had no timed case
    roi: Roi | None = None  # estimated from the headroom and the experiment's roi section
    net_usd: float | None = None  # saving over the payback window, minus the pilot cost
    optimized: OptimizedRun | None = None
    note: str = ""  # why it was not optimised, when it was chosen to be


class AuditPlan(WireModel):
    """What ``--optimize`` asked for."""

    strategy: str
    top: int
    max_cost_usd: float | None = None
    time_limit_s: float | None = None


class AuditReport(WireModel):
    schema_version: int = version_field(2)
    source: str  # the folder of experiments, or the list file
    started_at: str
    finished_at: str | None = None
    gpus: list[GpuRef] = Field(default_factory=list)
    backend: str = "local"
    roof_target: float  # the share of the bounding roof a tuned kernel is assumed to reach
    plan: AuditPlan | None = None
    entries: list[AuditEntry]


def create_audit_dir(results: Path) -> Path:
    """The next free ``audit-NNN`` folder under ``results`` (nothing is overwritten)."""
    results.mkdir(parents=True, exist_ok=True)
    while True:
        numbers = [int(m.group(1)) for p in results.iterdir() if (m := _AUDIT.match(p.name))]
        path = results / f"audit-{max(numbers, default=0) + 1:03d}"
        try:
            path.mkdir()
        except FileExistsError:
            continue
        return path
