"""Evaluate one kernel on an experiment: the core of ``cudaopt evaluate``.

On two GPUs or more the kernel and the ``.cu`` reference are measured at the same time, each on
a GPU of its own (of the same model: a pool has one); ``gpus`` says which measured which.
"""

from __future__ import annotations

from pydantic import Field

from .pool.dispatch import Evaluator, GpuRef, OnEvent
from .experiment import Experiment
from .wire.protocol import LaunchSpec, WireModel, TimingProtocol
from .wire.results import EvalResult
from .trial import Trial, source_trial


class Evaluation(WireModel):
    """What ``cudaopt evaluate --json`` writes."""

    candidate: EvalResult
    reference_timing: EvalResult | None = None  # the .cu reference timed with the same protocol, when there is one
    gpus: dict[str, GpuRef] = Field(default_factory=dict)  # "candidate", "reference": the GPU that measured it

    def speedup(self, case: str) -> float | None:
        """Reference median over candidate median for one case, when both were timed."""
        if self.reference_timing is None:
            return None
        mine, theirs = self.candidate.find(case), self.reference_timing.find(case)
        if not (mine and theirs and mine.timing and theirs.timing and mine.status == "ok"):
            return None
        return theirs.timing.median_us / mine.timing.median_us


def evaluate_trial(trial: Trial, evaluator: Evaluator, *, time_reference: bool = True, time_vendor: bool = True,
                   on_event: OnEvent | None = None) -> Evaluation:
    """Check and time a prepared :class:`~cudaopt.trial.Trial` (its kernel, entry, launch and protocol)
    on the correctness and performance cases (never the holdout), with the experiment's vendor
    baseline timed beside it when it declares one (and ``time_vendor``), and the ``.cu`` reference
    with the same protocol (``time_reference``); the workers' messages go to ``on_event``."""
    experiment = trial.experiment
    requests = [trial.request(request_id="candidate", vendor=time_vendor)]
    if time_reference and experiment.reference_kind == "cu":
        requests.append(experiment.request(experiment.reference_source, entry=experiment.reference_entry,
                                           protocol=trial.protocol.model_copy(), roles={"performance"}, check=False,
                                           request_id="reference"))
    measured = evaluator.evaluate_all(requests, on_event=on_event)
    names = ["candidate", "reference"][:len(measured)]
    return Evaluation(candidate=measured[0].result, reference_timing=measured[1].result if len(measured) > 1 else None,
                      gpus={name: m.gpu for name, m in zip(names, measured, strict=True)})


def evaluate_kernel(experiment: Experiment, source: str, evaluator: Evaluator, *, entry: str | None = None,
                    launch: LaunchSpec | None = None, protocol: TimingProtocol | None = None,
                    **options) -> Evaluation:
    """:func:`evaluate_trial` on kernel text not read from a file (a benchmark's, a test's);
    ``options`` as its."""
    return evaluate_trial(source_trial(experiment, source, entry=entry, launch=launch, protocol=protocol), evaluator,
                          **options)
