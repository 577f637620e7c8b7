"""Schemas of the audit pack's JSON files (history, summary, model calls, environment).

The writers build these models, so every file on disk has been validated; readers (``--resume``,
reports, tests) validate again.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..harness.protocol import STATUSES


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Attempt(_Model):
    """One entry of history.json: the baseline, or one proposal (evaluated or rejected)."""

    id: int
    parent: int | None
    kind: Literal["baseline", "proposal", "tune"]
    status: str  # "ok", a harness outcome, or "rejected" (the model's answer never became a candidate)
    reason: str = ""
    source_file: str | None = None  # relative to the run directory
    launch: dict[str, Any] | None = None
    defines: dict[str, int | float | str] = Field(default_factory=dict)  # tunable values (-D defines)
    rationale: str = ""
    compile: dict[str, Any] | None = None
    cases: list[dict[str, Any]] = Field(default_factory=list)  # CaseResult, as the harness returned it
    score_us: float | None = None  # geometric mean of the performance medians, when every case passed
    model_calls: list[int] = Field(default_factory=list)
    eval_seconds: float = 0.0
    cached: bool = False  # the result came from the result cache, not a new measurement
    started_at: str
    finished_at: str


    @field_validator("status")
    @classmethod
    def _known_status(cls, value: str) -> str:
        if value not in (*STATUSES, "rejected"):
            raise ValueError(f"unknown status {value!r}")
        return value


class History(_Model):
    attempts: list[Attempt]


class ModelUsage(_Model):
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0


class ModelCall(_Model):
    """model-NNN.json: one request to the model, its answer, tool calls and usage."""

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


class CaseSummary(_Model):
    name: str
    role: str
    baseline_median_us: float | None
    best_median_us: float | None
    speedup: float | None  # vs the baseline (the initial kernel)
    vendor_median_us: float | None = None  # the vendor baseline, timed beside the initial kernel
    vendor_status: str | None = None  # "ok", "mismatch" or "error"; None when no vendor was timed
    speedup_vs_vendor: float | None = None  # vendor median / best median


class Totals(_Model):
    model_calls: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    reasoning_tokens: int = 0
    cost_usd: float = 0.0
    gpu_seconds: float = 0.0
    wall_seconds: float = 0.0


class Summary(_Model):
    run: str
    strategy: str
    description: str
    signature: str
    model: dict[str, Any]
    baseline_attempt: int
    best_attempt: int | None
    best_source_file: str | None
    best_defines: dict[str, int | float | str] = Field(default_factory=dict)
    cases: list[CaseSummary]
    baseline_score_us: float | None
    best_score_us: float | None
    speedup: float | None
    vendor: str | None = None  # the vendor baseline's label, when the experiment declares one
    vendor_score_us: float | None = None  # geometric mean of the vendor's medians (every performance case)
    speedup_vs_vendor: float | None = None  # vendor score / best score
    stop_reason: str
    attempts: int
    valid: int
    rejected_by_reason: dict[str, int]
    totals: Totals
    prices_usd_per_million_tokens: dict[str, float]
    ablation: dict[str, Any] | None = None  # --ablation: tune-only on the same experiment, for comparison
    review: list[str] = Field(default_factory=list)  # speed-ups too large to take on trust (> 10x)
