"""Evaluate one kernel on an experiment: the core of ``cudaopt evaluate``."""

from __future__ import annotations

from dataclasses import dataclass

from .evaluation.supervisor import Supervisor
from .experiment import Experiment
from .harness.protocol import EvalResult, LaunchSpec, TimingProtocol


@dataclass
class Evaluation:
    candidate: EvalResult
    reference: EvalResult | None  # the .cu reference timed with the same protocol, when there is one

    def speedup(self, case: str) -> float | None:
        """Reference median over candidate median for one case, when both were timed."""
        if self.reference is None:
            return None
        mine = next((c for c in self.candidate.cases if c.name == case), None)
        theirs = next((c for c in self.reference.cases if c.name == case), None)
        if not (mine and theirs and mine.timing and theirs.timing and mine.status == "ok"):
            return None
        return theirs.timing.median_us / mine.timing.median_us

    def to_dict(self) -> dict:
        from .harness.protocol import to_dict

        return {
            "candidate": to_dict(self.candidate),
            "reference_timing": to_dict(self.reference) if self.reference else None,
        }


def evaluate_kernel(
    experiment: Experiment,
    source: str,
    supervisor: Supervisor,
    *,
    entry: str | None = None,
    launch: LaunchSpec | None = None,
    protocol: TimingProtocol | None = None,
    time_reference: bool = True,
    time_vendor: bool = True,
) -> Evaluation:
    """Check and time ``source`` on the correctness and performance cases (never the holdout), with the
    experiment's vendor baseline timed beside it when it declares one (and ``time_vendor``)."""
    request = experiment.request(source, entry=entry, launch=launch, protocol=protocol, request_id="candidate",
                                 vendor=time_vendor)
    candidate = supervisor.evaluate(request)
    reference = None
    if time_reference and experiment.reference_kind == "cu":
        ref_request = experiment.request(
            experiment.reference_source,
            entry=experiment.reference_entry,
            protocol=protocol,
            roles={"performance"},
            check=False,
            request_id="reference",
        )
        reference = supervisor.evaluate(ref_request)
    return Evaluation(candidate=candidate, reference=reference)
