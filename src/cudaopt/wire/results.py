"""Evaluation results: what a worker measured, declared once.

The worker sends them as JSON in its ``result`` message; its lane (the local supervisor, or a Ray
actor) reads them back into these models, the run engine keeps them in ``history.json``
(``Attempt.cases``), the result cache stores them whole, the API returns them (``Evaluation``),
and the report and the model's prompt read their fields by name.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_serializer, model_validator

from .protocol import HARNESS_VERSION, Role, WireModel, drop_unset_entry, vendor_as_list

# Every way an evaluation can end. Only "ok" is a pass.
STATUSES = (
    "ok",
    "compile_error",
    "missing_entry",
    "bad_signature",
    "bad_launch_config",
    "launch_error",
    "mismatch",
    "guard_violation",
    "input_modified",
    "global_state",
    "timeout",
    "crashed",
    "implausible",
    "reference_error",
    "internal_error",
    "non_discriminating",  # the case accepts a trivial output (negative controls, controls.py)
    "precision",  # the compiled code uses math the experiment's precision policy does not allow
)
Status = Literal[STATUSES]  # type: ignore[valid-type]


class MeasuredPeaksInfo(WireModel):
    bytes_per_s: float
    flops_per_s: dict[str, float]
    measured_at: str = ""


class DeviceInfo(WireModel):
    """The GPU a worker runs on (``env.json``'s ``gpu``; the model's ``gpu_info`` tool)."""

    name: str = ""
    arch: str = ""
    sm_count: int | None = None
    l2_bytes: int | None = None
    max_shared_per_block_optin: int | None = None
    driver_cuda_version: str = ""
    driver_version: str = ""  # the driver's own version (NVML's, e.g. 580.159.04)
    cuda_core: str = ""
    nvrtc: str = ""
    pci_bus_id: str = ""
    peak_bytes_per_s: float | None = None
    measured_peaks: MeasuredPeaksInfo | None = None


class EntryInfo(WireModel):
    """What the driver reports of a kernel other than the signature's entry that a case launched:
    each kernel has registers of its own, so each its own occupancy."""

    registers: int
    spill_stores: int | None = None
    spill_loads: int | None = None
    local_bytes: int
    static_shared_bytes: int
    max_threads_per_block: int


class MathUse(WireModel):
    """One class of math in a compiled module (compilekit/math_units.py): its instructions, by opcode,
    and the first of them as nvdisasm prints it, with the function it is in."""

    count: int
    opcodes: dict[str, int]  # e.g. {"HMMA": 16, "F2FP": 2}
    example: str  # e.g. "HMMA.1684.F32.TF32 R8, R8, R24, RZ"
    function: str


class CompileInfo(WireModel):
    ok: bool
    log: str
    arch: str = ""
    seconds: float = 0.0
    registers: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None
    stack_bytes: int | None = None
    static_shared_bytes: int | None = None
    local_bytes: int | None = None
    max_threads_per_block: int | None = None
    global_bytes: int | None = None  # mutable device-global memory in the cubin
    global_symbols: dict[str, int] = Field(default_factory=dict)  # its variables by name, in bytes
    workspace_bytes: int = 0  # of which the arrays the harness poisons before every launch (Limits.workspace)
    device_malloc: bool = False
    cached: bool = False  # this worker compiled the same kernel before: its cubin, loaded afresh
    kept: bool = False  # an earlier process (the pre-flight, an earlier run) compiled it: its cubin read from disk
    entries: dict[str, EntryInfo] = Field(default_factory=dict)  # other kernels the cases launched
    # the math units of every function of the module, per class ("fp32", "tf32", ...), read from its SASS;
    # None: not read (math_error says why, and the worker refuses the kernel)
    math: dict[str, MathUse] | None = None
    math_error: str = ""
    fast_math: list[str] = Field(default_factory=list)  # compile options that trade precision for speed

    def resources(self, entry: str | None) -> tuple[int | None, int | None, int | None]:
        """Registers and spill stores/loads of the kernel a case launched (``ResolvedLaunch.entry``)."""
        other = self.entries.get(entry) if entry else None
        if other is not None:
            return other.registers, other.spill_stores, other.spill_loads
        return self.registers, self.spill_stores, self.spill_loads


class CheckInfo(WireModel):
    """The comparison of one output of one input set with the reference.

    ``input_set`` -1 with ``launch`` set: the fresh inputs of that timed launch (0-based among the
    timed launches), drawn at random and never seen by the kernel before. ``expected`` and
    ``actual`` are None when the value is not finite."""

    output: str
    input_set: int
    phase: Literal["check", "timed"]
    ok: bool
    elements: int
    mismatches: int = 0
    unwritten: int = 0
    nan_count: int = 0
    inf_count: int = 0
    max_abs_error: float = 0.0
    max_rel_error: float = 0.0
    rel_l2_error: float = 0.0
    first_bad_index: list[int] | None = None
    expected: float | None = None
    actual: float | None = None
    launch: int | None = None


class TimingStats(WireModel):
    median_us: float
    mean_us: float
    stdev_us: float
    min_us: float
    max_us: float
    p10_us: float
    p90_us: float
    n: int
    method: str = ""


class VendorResult(WireModel):
    """The vendor baseline on one case: checked once against the reference, then timed.

    ``error``: it could not run (library missing, an exception); ``mismatch``: its outputs
    disagree with the reference. Neither ever fails the candidate; only ``ok`` gets a timing.
    """

    label: str
    status: Literal["ok", "mismatch", "error"]
    reason: str = ""
    checks: list[CheckInfo] = Field(default_factory=list)
    timing: TimingStats | None = None


class ResolvedLaunch(WireModel):
    """A launch with every expression evaluated for one case: what the driver is given."""

    grid: tuple[int, int, int]
    block: tuple[int, int, int]
    shared_bytes: int = 0
    entry: str | None = None  # the kernel, when the launch names one (else the signature's)
    tier: str | None = None  # the tier taken, when the launch has named tiers

    @model_serializer(mode="wrap")
    def _without_unset_entry(self, handler):
        data = drop_unset_entry(handler(self))
        if isinstance(data, dict) and data.get("tier", "") is None:
            data.pop("tier")
        return data

    @property
    def threads(self) -> int:
        return self.block[0] * self.block[1] * self.block[2]


class Occupancy(WireModel):
    blocks_per_sm: int | None = None
    warps_per_sm: int | None = None
    occupancy: float | None = None
    error: str = ""


class Roofline(WireModel):
    """Achieved rates against the roofs, and the speed-of-light floor (worker/peaks.py)."""

    flops: float | None = None
    achieved_tflops: float | None = None
    peak_tflops: float | None = None
    peak_tflops_from: Literal["measured", "spec"] | None = None
    compute_pct: float | None = None
    bytes: float | None = None
    achieved_gbps: float | None = None
    peak_gbps: float | None = None
    peak_gbps_from: Literal["measured", "spec"] | None = None
    memory_pct: float | None = None
    floor_us: float | None = None
    bound: Literal["compute", "memory"] | None = None
    floor_rate: str = ""  # which peak bounds the floor, e.g. float32_cuda_cores
    error: str = ""  # the work could not be evaluated


class Clocks(WireModel):
    sm_mhz: int | None = None
    mem_mhz: int | None = None
    temperature_c: int | None = None
    power_w: float | None = None
    error: str = ""


class LaunchScan(WireModel):
    """The launch scan of a case's timed launches: which were checked on fresh inputs, and how many
    were scanned for unwritten outputs and changed inputs."""

    checked_launches: list[int] = Field(default_factory=list)
    launches_scanned: int = 0
    seed: int | None = None


class ControlOutcome(WireModel):
    """A trivial output that the check of one output accepted: the case cannot tell it from the answer."""

    output: str
    trivial: str  # what it was: "zeros", "a copy of input x", "the answer for input set 1", ...
    input_set: int  # the input set whose answer accepted it
    max_abs_error: float
    rtol: float
    atol: float


class Controls(WireModel):
    """The negative controls of a case (worker/controls.py): ``tried`` trivial outputs compared with
    the reference's answers under the case's tolerances; ``accepted`` those that passed (none: the
    case discriminates); ``waived`` the case's written ``trivial_ok`` reason when some passed."""

    tried: int = 0
    accepted: list[ControlOutcome] = Field(default_factory=list)
    waived: str = ""

    @property
    def discriminating(self) -> bool:
        return not self.accepted


class CaseResult(WireModel):
    name: str
    role: Role
    status: Status
    reason: str = ""
    launch: ResolvedLaunch | None = None
    occupancy: Occupancy | None = None
    checks: list[CheckInfo] = Field(default_factory=list)
    timing: TimingStats | None = None
    clocks: dict[Literal["before", "after"], Clocks] = Field(default_factory=dict)
    roofline: Roofline | None = None
    phases: dict[str, float] = Field(default_factory=dict)  # wall seconds per step
    vendors: list[VendorResult] = Field(default_factory=list)  # in the request's order
    scan: LaunchScan | None = None
    controls: Controls | None = None  # None: not run (a request that does not check)

    @model_validator(mode="before")
    @classmethod
    def _one_vendor(cls, data: Any) -> Any:
        if isinstance(data, dict) and "audit" in data:  # the launch scan's name before history.json 4
            data = {**{k: v for k, v in data.items() if k != "audit"}, "scan": data["audit"]}
        return vendor_as_list(data)

    @field_validator("launch", "occupancy", "roofline", "scan", mode="before")
    @classmethod
    def _empty_is_none(cls, value: Any) -> Any:
        return None if value == {} else value  # history.json before schema 2 wrote {} for "none"

    @property
    def median_us(self) -> float | None:
        """The score's ingredient: the median of a passing, timed case."""
        return self.timing.median_us if self.status == "ok" and self.timing else None

    def vendor_median_us(self, index: int = 0) -> float | None:
        """The median of the ``index``-th vendor of the request, when it passed and was timed."""
        vendor = self.vendors[index] if index < len(self.vendors) else None
        return vendor.timing.median_us if vendor and vendor.status == "ok" and vendor.timing else None


class EvalResult(WireModel):
    status: Status
    reason: str = ""
    request_id: str = ""
    compile: CompileInfo | None = None
    cases: list[CaseResult] = Field(default_factory=list)
    device: DeviceInfo = Field(default_factory=DeviceInfo)
    wall_s: float = 0.0
    seed: int | None = None  # the protocol seed this evaluation used (set it in a request to reproduce)
    harness_version: str = HARNESS_VERSION

    @property
    def ok(self) -> bool:
        return self.status == "ok"

    def case(self, name: str) -> CaseResult:
        return next(c for c in self.cases if c.name == name)

    def find(self, name: str) -> CaseResult | None:
        return next((c for c in self.cases if c.name == name), None)
