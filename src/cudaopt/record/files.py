"""Schemas of a run directory's files, declared once.

The writers build these models, so every file on disk has been validated; readers (``--resume``,
verify, replay, the report, tests) validate again. Each file carries ``schema_version``; a
reader refuses a version newer than it knows. ``docs/schemas/`` holds their JSON Schemas
(``python -m cudaopt.schemas``). Files whose shape a version changed:

- ``history.json`` 2: a case's ``launch``, ``occupancy``, ``roofline`` and launch scan are
  ``null`` when absent (version 1 wrote ``{}``; it is still read). 3: each attempt's ``gpu``,
  the GPU that measured it (``null`` in older files), and a case's ``vendors`` is a list (version
  2 had one ``vendor`` or none; it is still read). 4: a case's launch scan is ``scan`` (``audit``
  before; still read).
- ``summary.json`` 2: ``vendors`` per run and per case (version 1 had the flat ``vendor``,
  ``vendor_score_us``, ``speedup_vs_vendor`` and per case ``vendor_median_us``, ``vendor_status``,
  ``speedup_vs_vendor``; still read), ``baseline`` (what the speed-ups are over), ``kernelbench``
  (the metrics with PyTorch baselines), ``per_case_best`` and ``dispatch_score_us``, and
  ``finalists``, the best attempts measured again on one GPU when several GPUs measured them.
  3: ``best_math``, the math units the winner's compiled code uses (absent in older files: none);
     ``audit``, the crowning audit (absent in older files: read as a run crowned without one).
- ``env.json`` 2: ``pool``, every GPU the run could use, and ``backend``.
- ``verify.json`` 2: ``timed`` (timed holdout cases and shape sweeps), ``regressions``, ``repeats``,
  ``shapes_file``, and each case's ``gpu`` (version 1 had none of them; it is still read). 3:
  ``dispatch`` and, per timed case, its dispatch class and the single winner's times (absent in
  older files: read as no table). 4: each compute-sanitizer tool's ``log`` file (older files: none).
- ``replay.json`` 2: each case's ``gpu``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field, field_validator, model_validator

from ..pool.dispatch import GpuRef
from ..wire.fields import version_field
from ..wire.protocol import LaunchSpec, WireModel
from ..wire.results import STATUSES, CaseResult, CompileInfo, DeviceInfo
from .crown import CrowningAudit, Finalists


class Attempt(WireModel):
    """One entry of history.json: the baseline, or one proposal (evaluated or rejected)."""

    id: int
    parent: int | None
    kind: Literal["baseline", "proposal", "tune"]
    status: str  # "ok", a harness outcome, or "rejected" (the model's answer never became a candidate)
    reason: str = ""
    source_file: str | None = None  # relative to the run directory
    launch: LaunchSpec | None = None  # None: each case's own launch (the input cases')
    defines: dict[str, int | float | str] = Field(default_factory=dict)  # tunable values (-D defines)
    rationale: str = ""
    compile: CompileInfo | None = None
    cases: list[CaseResult] = Field(default_factory=list)  # as the harness returned them
    score_us: float | None = None  # geometric mean of the performance medians, when every case passed
    model_calls: list[int] = Field(default_factory=list)
    eval_seconds: float = 0.0
    cached: bool = False  # the result came from the result cache, not a new measurement
    gpu: GpuRef | None = None  # the GPU that measured it (a cached result: the GPU of the earlier measurement)
    started_at: str
    finished_at: str

    @field_validator("status")
    @classmethod
    def _known_status(cls, value: str) -> str:
        if value not in (*STATUSES, "rejected"):
            raise ValueError(f"unknown status {value!r}")
        return value

    def medians(self) -> dict[str, float]:
        """Case name → median µs, for every passing timed case; for a baseline without a kernel
        (the vendors alone), the first vendor's."""
        if self.kind == "baseline" and self.source_file is None:
            return {c.name: c.vendor_median_us(0) for c in self.cases if c.vendor_median_us(0) is not None}
        return {c.name: c.median_us for c in self.cases if c.median_us is not None}


class History(WireModel):
    schema_version: int = version_field(4)
    attempts: list[Attempt]


class ModelUsage(WireModel):
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


class ModelCall(WireModel):
    """model-NNN.json: one request to the model, its answer, tool calls and usage."""

    schema_version: int = version_field(1)
    id: int
    attempt: int
    model: str
    messages: list[dict[str, Any]]
    response: str = ""
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    usage: ModelUsage = Field(default_factory=ModelUsage)
    cost_usd: float = 0.0
    latency_s: float = 0.0
    requests: int = 1  # requests sent in this turn: tool-call rounds and retries included
    retries: int = 0
    error: str | None = None


class Roi(WireModel):
    """The return-on-investment worksheet of one case (report/roi.py computes it; the report and
    audit.json show it)."""

    case: str
    baseline_ms: float
    best_ms: float
    ms_saved_per_call: float
    engineer_cost_usd: float
    model_cost_usd: float
    gpu_cost_usd: float
    pilot_cost_usd: float
    saved_gpu_hours_per_month: float
    monthly_saving_usd: float
    payback_months: float | None  # None: nothing is saved, the pilot never pays back
    fits_window: bool
    note: str | None = None  # roi.case named a case not timed here: the slowest one stands in


class CaseVendor(WireModel):
    """One vendor on one case, timed in the baseline evaluation."""

    label: str
    median_us: float | None = None
    status: str | None = None  # "ok", "mismatch" or "error"; None when it was not timed
    speedup: float | None = None  # vendor median / best median


class CaseSummary(WireModel):
    name: str
    role: str
    baseline_median_us: float | None
    best_median_us: float | None
    speedup: float | None  # vs the baseline (the initial kernel, or the first vendor without one)
    vendors: list[CaseVendor] = Field(default_factory=list)


class VendorSummary(WireModel):
    """One vendor over the run: the geometric mean of its medians and the best attempt's speed-up over it."""

    label: str
    pytorch: str | None = None  # "eager" or "compile": a PyTorch baseline
    score_us: float | None = None  # over every performance case, when each was timed
    speedup: float | None = None  # vendor score / best score


class KernelBenchMetrics(WireModel):
    """The run as KernelBench reports a problem: correct or not, and the speed-ups over PyTorch."""

    correct: bool  # some attempt passed every correctness and performance case
    speedup_vs_eager: float | None = None
    speedup_vs_compile: float | None = None  # None when torch.compile could not run here
    # how the checks differ from KernelBench's own (config.KernelBenchOrigin): [] none; None not imported
    changes: list[str] | None = None

    @classmethod
    def of(cls, vendors: list[VendorSummary], correct: bool,
           changes: list[str] | None = None) -> KernelBenchMetrics | None:
        """KernelBench's view of a run, when a vendor is the PyTorch eager baseline."""
        by_kind = {v.pytorch: v for v in vendors if v.pytorch}
        if "eager" not in by_kind:
            return None
        compiled = by_kind.get("compile")
        return cls(correct=correct, speedup_vs_eager=by_kind["eager"].speedup if correct else None,
                   speedup_vs_compile=compiled.speedup if compiled and correct else None, changes=changes)


class CaseBest(WireModel):
    """The fastest passing attempt on one performance case, beside the overall winner's time there."""

    case: str
    attempt: int
    defines: dict[str, int | float | str] = Field(default_factory=dict)
    best_us: float
    winner_us: float | None
    gain: float | None  # winner / best: what a dispatch choosing per shape would gain here


class Totals(WireModel):
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    gpu_seconds: float = 0.0
    wall_seconds: float = 0.0


class TimeSpent(WireModel):
    """Where a run's time went, in seconds. The steps on the GPU workers are summed over the run's
    attempts (measured, not cached) and over its GPUs; NVRTC runs on the workers' CPUs beside them,
    so its sum is apart and may exceed the wall time. On one GPU the rest of ``wall_s``
    (:attr:`other_s`) is the host's own work: waiting for a kernel still compiling, loading
    modules, the model's answers, writing the run directory."""

    preflight_s: float = 0.0  # the checks of ``cudaopt check``, before any GPU work
    workers_s: float = 0.0  # the GPU workers started: CUDA contexts, the device's peaks
    checks_s: float = 0.0  # inputs staged, the references run, the negative controls, the outputs checked
    timing_s: float = 0.0  # the timed launches and their scan (the vendors' beside the baseline)
    measured_again_s: float = 0.0  # the finalists' rounds
    audit_s: float = 0.0  # the crowning audit's own evaluations
    compile_s: float = 0.0  # NVRTC, summed over the kernels compiled for the attempts
    wall_s: float = 0.0  # from the pre-flight to the summary
    gpus: int = 1  # the GPUs the attempts were measured on

    @property
    def other_s(self) -> float | None:
        """The wall time no step accounts for; None on several GPUs, whose steps overlap."""
        if self.gpus > 1:
            return None
        return max(0.0, self.wall_s - (self.preflight_s + self.workers_s + self.checks_s + self.timing_s
                                       + self.measured_again_s + self.audit_s))


class Summary(WireModel):
    """summary.json (version 2: vendors as a list, ``baseline``, ``kernelbench``, ``per_case_best``,
    ``dispatch_score_us`` and ``finalists``; 3: ``best_math`` and ``audit``; 4: ``time``)."""

    schema_version: int = version_field(4)
    run: str
    strategy: str
    description: str
    signature: str
    model: dict[str, Any]
    baseline_attempt: int
    best_attempt: int | None
    best_source_file: str | None
    best_defines: dict[str, int | float | str] = Field(default_factory=dict)
    best_math: str | None = None  # the math units the best attempt's compiled code uses, e.g. "FP32 CUDA cores"
    cases: list[CaseSummary]
    baseline: str = "initial kernel"  # what attempt 0 and the speed-ups are over: or "vendor: LABEL"
    baseline_score_us: float | None
    best_score_us: float | None
    speedup: float | None
    vendors: list[VendorSummary] = Field(default_factory=list)  # the experiment's, in order
    kernelbench: KernelBenchMetrics | None = None  # with a PyTorch eager vendor
    stop_reason: str
    attempts: int
    valid: int
    rejected_by_reason: dict[str, int]
    totals: Totals
    prices_usd_per_million_tokens: dict[str, float]
    ablation: dict[str, Any] | None = None  # --ablation: tune-only on the same experiment, for comparison
    review: list[str] = Field(default_factory=list)  # speed-ups too large to take on trust (> 10x)
    per_case_best: list[CaseBest] = Field(default_factory=list)
    dispatch_score_us: float | None = None  # geomean of the per-case bests: a perfect per-shape dispatch
    finalists: Finalists | None = None
    audit: CrowningAudit | None = None  # None: not crowned yet (a run in progress, or interrupted before its crown)
    time: TimeSpent | None = None  # None: a summary from before it was kept

    @model_validator(mode="before")
    @classmethod
    def _one_vendor(cls, data: Any) -> Any:
        """summary.json 1 had one vendor, in flat fields: read as a list of one (or none)."""
        if not isinstance(data, dict) or not {"vendor", "vendor_score_us", "speedup_vs_vendor"} & set(data):
            return data
        data = dict(data)
        label = data.pop("vendor", None)
        score, speedup = data.pop("vendor_score_us", None), data.pop("speedup_vs_vendor", None)
        data["vendors"] = [{"label": label, "score_us": score, "speedup": speedup}] if label else []
        cases = []
        for case in data.get("cases", []):
            case = dict(case)
            median, status = case.pop("vendor_median_us", None), case.pop("vendor_status", None)
            case_speedup = case.pop("speedup_vs_vendor", None)
            case["vendors"] = [{"label": label, "median_us": median, "status": status,
                                "speedup": case_speedup}] if label else []
            cases.append(case)
        data["cases"] = cases
        return data


class Environment(WireModel):
    """env.json: where the run ran."""

    schema_version: int = version_field(2)
    gpu: DeviceInfo  # the first GPU: the model every measurement of the run was made on
    pool: list[GpuRef] = Field(default_factory=list)  # every GPU the run could measure on
    backend: str = "local"  # "local", or "ray ADDRESS"
    python: str
    platform: str
    packages: dict[str, str | None]
    git: dict[str, Any]
    started_at: str
    finished_at: str | None = None


class SanitizeReport(WireModel):
    """One compute-sanitizer tool's verdict on the winner (``verify --sanitize``)."""

    tool: str
    passed: bool
    errors: int | None  # None: the tool wrote no summary
    status: str  # the evaluation's outcome under the tool
    reason: str = ""
    report: str = ""  # the first lines of the tool's log
    log: str = ""  # the tool's whole log (a file in the run directory)


class VerifiedCase(WireModel):
    name: str
    role: str
    status: str
    reason: str = ""
    max_abs_error: float | None = None
    max_rel_error: float | None = None
    input_sets_checked: int = 0
    gpu: GpuRef | None = None


class TimedCase(WireModel):
    """One shape timed by verify: the winner, the baseline and the vendor, interleaved repeat by repeat.

    A ``regression`` is a shape where the winner was slower than the baseline in every repeat by
    more than ``margin`` (the larger of 2% and the measured spread): slower beyond noise."""

    name: str
    origin: Literal["holdout", "shapes"]
    scalars: dict[str, int | float]
    status: str  # the winner's outcome on this shape (checked as it was timed)
    reason: str = ""
    winner_medians_us: list[float] = Field(default_factory=list)
    baseline_medians_us: list[float | None] = Field(default_factory=list)
    vendor_medians_us: list[float | None] = Field(default_factory=list)
    winner_us: float | None = None  # the median over the repeats
    baseline_us: float | None = None
    vendor_us: float | None = None
    speedup_vs_baseline: float | None = None  # median of the paired ratios baseline / winner
    speedup_vs_vendor: float | None = None
    vendor_status: str = ""  # where the vendor did not pass and time in some repeat: its outcome
    vendor_reason: str = ""
    margin: float = 0.02
    regression: bool = False
    # with an adopted dispatch table (dispatch.json): the shape's class, and the single winner timed
    # beside the class's configuration where the two differ
    dispatch_class: str | None = None
    dispatch_attempt: int | None = None
    single_medians_us: list[float | None] = Field(default_factory=list)
    single_us: float | None = None
    speedup_vs_single: float | None = None  # median of the paired ratios single winner / dispatched


class VerifyOutcome(WireModel):
    """verify.json: the winner on the holdout (and extra) cases, with fresh seeds; the timed holdout
    cases and any shape sweep beside the baseline and the vendor (version 2 added ``timed``; 3 the
    dispatch table's fields: ``dispatch`` and each timed case's class and single-winner times; 4 each
    sanitizer tool's log file)."""

    schema_version: int = version_field(4)
    passed: bool
    status: str
    reason: str = ""
    attempt: int | None  # None: a kernel verified outside a run (the Python API's Trial; not written)
    seed: int
    cases: list[VerifiedCase]
    timed: list[TimedCase] = Field(default_factory=list)
    regressions: list[str] = Field(default_factory=list)  # names of the timed shapes that regressed
    repeats: int = 0
    shapes_file: str | None = None
    sanitize: list[SanitizeReport] | None = None
    dispatch: bool = False  # each case ran with its class's configuration (an adopted dispatch table)

    def worst(self, count: int = 3) -> list[TimedCase]:
        """The timed shapes with the lowest speed-up over the baseline (over the vendor without one)."""
        def key(case: TimedCase) -> float:
            value = case.speedup_vs_baseline or case.speedup_vs_vendor
            return value if value is not None else float("inf")
        return sorted((c for c in self.timed if key(c) != float("inf")), key=key)[:count]


class ReplayedCase(WireModel):
    name: str
    role: str
    status: str
    recorded_us: float | None = None
    now_us: float | None = None
    winner_medians_us: list[float | None] = Field(default_factory=list)
    baseline_medians_us: list[float | None] = Field(default_factory=list)
    within_noise: bool | None = None
    speedup_vs_baseline: float | None = None
    vendor_medians_us: list[float | None] = Field(default_factory=list)
    vendor_us: float | None = None
    speedup_vs_vendor: float | None = None
    beats_baseline: bool | None = None
    gpu: GpuRef | None = None  # the GPU every measurement of this case was made on


class ReplayOutcome(WireModel):
    """replay.json: the winner measured again, interleaved with the baseline."""

    schema_version: int = version_field(2)
    passed: bool
    environment_differences: list[str] = Field(default_factory=list)
    failures: list[str] = Field(default_factory=list)
    beats_baseline: bool = False
    slower_cases: list[str] = Field(default_factory=list)
    repeats: int = 0
    cases: list[ReplayedCase] = Field(default_factory=list)
