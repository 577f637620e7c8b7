"""The attempts of one run and the files that hold them.

Every strategy (the agent, the tuner) evaluates candidates through a :class:`Recorder`, so
history.json, summary.json, best.cu, best-case-N.json, candidates/ and the heatmap mean the
same thing whichever strategy produced them. A batch of candidates is measured on every GPU of
the pool at once and recorded in the batch's order, whichever GPU finished first; each attempt
names the GPU that measured it, and the best is chosen among measurements of the baseline's GPU
model only.
"""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..pool.dispatch import Evaluator, GpuRef, Measured
from ..experiment import Experiment
from ..reading import LaunchFile
from ..wire.messages import PhaseStarted, WorkerMessage
from ..wire.protocol import LaunchSpec, Timeouts
from ..wire.results import EvalResult
from ..record.bake import bake, bake_launch
from ..record.cache import ResultCache
from ..record.events import AttemptFinished, AttemptStarted, OnProgress, PhaseProgress, UsageProgress, ignore
from ..record.rundir import RunDir
from ..record.runs import model_calls, read_run_json
from ..record.crown import CrowningAudit, Finalists
from ..record.files import Attempt, History, ModelCall, Summary, TimeSpent
from ..trial import Trial, run_trial
from .scoring import baseline_of, best_of, comparable, medians, score
from .summary import RunFacts, summarise
from ..record.heatmap import Row, draw

ROLES = {"correctness", "performance"}  # holdout cases are never evaluated here


@dataclass
class Candidate:
    """A kernel to evaluate and where it came from: one attempt, once measured."""
    kind: str
    source: str | None  # None: no kernel, the vendors alone (a run without an initial kernel)
    launch: LaunchSpec | None
    defines: dict = field(default_factory=dict)
    parent: int | None = None
    rationale: str = ""
    calls: list[int] = field(default_factory=list)
    what: str = "evaluating"  # what the progress line says while it runs


def now() -> str:
    return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")


class Recorder:
    def __init__(self, experiment: Experiment, run: RunDir, evaluator: Evaluator, *, strategy: str,
                 model: dict, prices: dict, cache: ResultCache | None = None, on_progress: OnProgress = ignore):
        self.exp = experiment
        self.trial: Trial = run_trial(experiment)  # each candidate is a variant of it
        self.run = run
        self.evaluator = evaluator
        self.strategy = strategy
        self.model = model
        self.prices = prices
        self.cache = cache
        self.on_progress = on_progress
        self.cases = experiment.cases(ROLES)
        self.attempts: list[Attempt] = []
        self.calls: list[ModelCall] = []
        self.started = time.monotonic()
        self.previous_wall = 0.0
        self.before = TimeSpent()  # the pre-flight and the workers' start, timed by whoever did them
        self.stop_reason = ""
        self.ablation: dict | None = None
        self.finalists: Finalists | None = None
        self.audit: CrowningAudit | None = None  # the crowning audits (winner/crowning.py)
        # finalists that failed when measured again, candidates the crowning audit refused: they cannot win
        self.disqualified: set[int] = set()

    def count_start(self, preflight_s: float, workers_s: float) -> None:
        """The pre-flight and the workers' start, timed by whoever did them, added to the run's
        (a resumed run counts each of its starts)."""
        before = self.before
        self.before = before.model_copy(update={"preflight_s": round(before.preflight_s + preflight_s, 3),
                                                "workers_s": round(before.workers_s + workers_s, 3)})

    def load(self) -> None:
        """Continue a run: attempts from history.json, model usage from model-NNN.json."""
        self.attempts = read_run_json(self.run, RunDir.HISTORY, History).attempts
        self.calls = model_calls(self.run)
        if self.run.file(RunDir.SUMMARY).is_file():
            summary = Summary.model_validate(self.run.read_json(RunDir.SUMMARY))
            self.previous_wall = summary.totals.wall_seconds
            if summary.time:  # a resumed run's own start counts too
                self.before = self.before.model_copy(update={"preflight_s": summary.time.preflight_s,
                                                             "workers_s": summary.time.workers_s})
            if summary.finalists:
                self.disqualified = {f.attempt for f in summary.finalists.finalists if f.score_us is None}
            if summary.audit:  # a resumed run's later audits need more: the run's bound covers them all
                self.audit = summary.audit
                self.disqualified |= {a.attempt for a in summary.audit.audits if a.status != "ok"}
        self.run.log(f"resumed with {len(self.attempts)} attempt(s) and {len(self.calls)} model call(s)")

    # --- derived state -------------------------------------------------------------------

    @property
    def baseline(self) -> Attempt | None:
        return baseline_of(self.attempts)

    @property
    def best(self) -> Attempt | None:
        """The winner (engine/scoring.py: ``best_of``)."""
        return best_of(self.attempts, self.finalists, self.disqualified)

    def comparable(self, attempt: Attempt) -> bool:
        """Measured on the baseline's GPU model (files from before GPUs were recorded: assumed so)."""
        return comparable(attempt, self.baseline)

    def timeouts(self) -> Timeouts:
        """Fixed phase limits until the baseline passed, then scaled from its measured phases. A
        baseline without a kernel (the vendors alone) says nothing about how long a kernel of the
        model's may take: then the first kernel that passed is the measure."""
        baseline = self.baseline
        if baseline is not None and baseline.source_file is None:
            baseline = next((a for a in self.attempts if a.source_file and a.status == "ok"), None)
        if baseline is None or baseline.status != "ok":
            return self.exp.timeouts.fixed()
        return self.exp.timeouts.scaled(baseline.cases)

    def count(self, kind: str) -> int:
        return sum(1 for a in self.attempts if a.kind == kind)

    def model_calls(self) -> int:
        return sum(c.requests for c in self.calls)

    def cost(self) -> float:
        return sum(c.cost_usd for c in self.calls)

    def since_best(self, kind: str) -> int:
        best = self.best
        last_id = best.id if best else 0
        return sum(1 for a in self.attempts if a.id > last_id and a.kind == kind)

    def wall(self) -> float:
        return self.previous_wall + time.monotonic() - self.started

    def source(self, attempt: Attempt | None) -> str | None:
        if attempt is None or attempt.source_file is None:
            return None
        return self.run.file(attempt.source_file).read_text()

    # --- recording -----------------------------------------------------------------------

    def ensure_baseline(self) -> Attempt:
        """Attempt 0, the bar every candidate is measured against: the initial kernel, evaluated
        once per run (a resumed run keeps its own), with the vendors timed beside it; without an
        initial kernel, the vendors alone (speed-ups are then over the first vendor)."""
        if self.baseline is None:
            self.evaluate("baseline", self.trial.source, None)
        return self.baseline

    @property
    def baseline_label(self) -> str:
        """What the speed-ups are over: the initial kernel, or the first vendor."""
        if self.exp.initial_kernel_path is None and self.exp.primary_vendor is not None:
            return f"vendor: {self.exp.primary_vendor.label}"
        return "initial kernel"

    def evaluate(self, kind: str, source: str | None, launch: LaunchSpec | None, *, defines: dict | None = None,
                 parent: int | None = None, rationale: str = "", calls: list[int] | None = None) -> Attempt:
        """Evaluate a candidate on the correctness and performance cases and record the attempt
        (``source`` None: the vendors alone, as the baseline of a run without an initial kernel)."""
        (attempt,) = self.evaluate_many([Candidate(kind, source, launch, dict(defines or {}), parent, rationale,
                                                   list(calls or []), what=kind if kind == "baseline" else "evaluating")])
        return attempt

    def compile_ahead(self, candidates: list[Candidate]) -> None:
        """Candidates the run will measure next as one batch, compiled meanwhile (beside the
        baseline): a tuning sweep's compilation, seconds per configuration, leaves the critical path.
        Those the results cache answers are never measured, so not compiled."""
        requests = [self.trial.variant(c.source, c.launch, c.defines).request(roles=ROLES)
                    for c in candidates if c.source is not None]
        kernels = [r.kernel for r in requests if not (self.cache and r in self.cache)]
        if kernels:
            self.evaluator.compile_ahead(kernels)

    def evaluate_many(self, candidates: list[Candidate],
                      should_stop: Callable[[], bool] | None = None) -> list[Attempt | None]:
        """Evaluate candidates on every GPU of the pool; the attempts are recorded in the candidates'
        order, with the ids they would have had one after another. Cached results are recorded
        without a measurement. ``should_stop`` is asked before each measurement starts; once it is
        true the rest are not measured (None in the answer)."""
        base = len(self.attempts)
        timeouts = self.timeouts()
        requests = [self.trial.variant(c.source, c.launch, c.defines).request(
                        roles=ROLES, request_id=f"attempt-{base + i}", vendor=c.kind == "baseline", timeouts=timeouts)
                    for i, c in enumerate(candidates)]
        cached = [self.cache.get(r) if self.cache else None for r in requests]
        todo = [i for i, hit in enumerate(cached) if hit is None]
        out: list[Attempt | None] = [None] * len(candidates)
        started = [now()] * len(candidates)
        recorded = 0  # candidates before this one are recorded, or will never be

        def record_cached(until: int) -> None:
            nonlocal recorded
            for i in range(recorded, until):
                if cached[i] is not None:
                    out[i] = self._record(candidates[i], cached[i], GpuRef.of(cached[i].device), True, started[i])
            recorded = max(recorded, until)

        def on_start(j: int, gpu: GpuRef) -> None:
            i = todo[j]
            started[i] = now()
            self.on_progress(AttemptStarted(id=base + i, what=f"{candidates[i].what} on {gpu.label}"))

        def on_done(j: int, measured: Measured | None) -> None:
            i = todo[j]
            record_cached(i)
            if measured is not None:
                if self.cache:
                    self.cache.put(requests[i], measured.result)
                out[i] = self._record(candidates[i], measured.result, measured.gpu, False, started[i])
            record_cached(i + 1)

        if todo:
            self.evaluator.evaluate_all([requests[i] for i in todo], on_event=self._on_worker_event,
                                        on_start=on_start, on_done=on_done, should_stop=should_stop)
        record_cached(len(candidates))
        return out

    def settle(self, finalists: Finalists) -> None:
        """The finalists' measurement on one GPU declares the winner (winner/replay.py measures them)."""
        previous = self.best
        self.finalists = finalists
        self.disqualified |= {f.attempt for f in finalists.finalists if f.score_us is None}
        best = self.best
        self.run.log(f"finalists measured again on {finalists.gpu.label}: winner "
                     f"{'#' + str(best.id) if best else 'none'}")
        self._follow_best(previous)

    def refuse(self, attempt_id: int, reason: str) -> None:
        """The crowning audit refused this candidate: it cannot win, and the best files follow the next."""
        previous = self.best
        self.disqualified.add(attempt_id)
        self.run.log(f"attempt {attempt_id} refused by the crowning audit: {reason.splitlines()[0][:200] if reason else ''}")
        self._follow_best(previous)

    def crown(self, audit: CrowningAudit) -> None:
        """The crowning audits are done (winner/crowning.py): the winner, if any, passed the last."""
        self.audit = audit
        passed = f"#{audit.winner}, escape bound {audit.escape_bound:.3g}" if audit.winner is not None else "none"
        self.run.log(f"crowning audit: winner {passed}; run {audit.run_escape_bound:.3g}")
        self.write_summary()

    def _follow_best(self, previous: Attempt | None) -> None:
        """best.cu, best-launch.json and best-case-N.json for the best now (none: removed), and the summary."""
        best = self.best
        if best is not previous:
            if best is not None:
                self._write_best(best, self.source(best))
            else:
                for old in [self.run.file(RunDir.BEST), self.run.file(RunDir.BEST_LAUNCH),
                            *self.run.path.glob(RunDir.BEST_CASES)]:
                    old.unlink(missing_ok=True)
        self.write_summary()

    def _record(self, candidate: Candidate, result: EvalResult, gpu: GpuRef, cached: bool, started: str) -> Attempt:
        attempt_id = len(self.attempts)
        source_file = RunDir.candidate(attempt_id) if candidate.source is not None else None
        if source_file:
            self.run.write_text(source_file, candidate.source)
        attempt = Attempt(
            id=attempt_id, parent=candidate.parent, kind=candidate.kind, status=result.status, reason=result.reason,
            source_file=source_file, launch=candidate.launch, defines=dict(candidate.defines),
            rationale=candidate.rationale, compile=result.compile, cases=result.cases,
            score_us=score(result.cases) if result.ok and source_file else None, model_calls=list(candidate.calls),
            eval_seconds=0.0 if cached else result.wall_s, cached=cached, gpu=gpu, started_at=started,
            finished_at=now(),
        )
        self._append(attempt)
        if attempt.score_us is not None and self.best is attempt:
            self._write_best(attempt, candidate.source)
        return attempt

    def reject(self, parent: int | None, reason: str, calls: list[int]) -> Attempt:
        stamp = now()
        attempt = Attempt(id=len(self.attempts), parent=parent, kind="proposal", status="rejected", reason=reason,
                          model_calls=calls, started_at=stamp, finished_at=stamp)
        self._append(attempt)
        return attempt

    def add_call(self, call: ModelCall) -> None:
        self.calls.append(call)
        self.run.write_text(RunDir.model_call(call.id), call.model_dump_json(indent=2))
        self.run.log(f"model call {call.id} for attempt {call.attempt}: {call.usage.input_tokens} in, "
                     f"{call.usage.output_tokens} out, {call.latency_s} s" + (f", error: {call.error}" if call.error else ""))
        tokens = sum(c.usage.input_tokens + c.usage.output_tokens for c in self.calls)
        self.on_progress(UsageProgress(tokens=tokens, cost=self.cost()))

    def _on_worker_event(self, message: WorkerMessage) -> None:
        if isinstance(message, PhaseStarted):
            self.on_progress(PhaseProgress(phase=message.phase, case=message.case))

    def _append(self, attempt: Attempt) -> None:
        self.attempts.append(attempt)
        self.run.write_model(RunDir.HISTORY, History(attempts=self.attempts))
        detail = f", {attempt.score_us:.3f} us" if attempt.score_us else ""
        if attempt.status != "ok" and attempt.reason:
            detail += f": {attempt.reason.splitlines()[0][:200]}"
        self.run.log(f"attempt {attempt.id} ({attempt.kind}{', cached' if attempt.cached else ''}): "
                     f"{attempt.status}{detail}")
        self.write_summary()
        best = self.best
        self.on_progress(AttemptFinished(id=attempt.id, status=attempt.status, score=attempt.score_us,
                                         best=best.score_us if best else None, best_id=best.id if best else None))

    def _write_best(self, attempt: Attempt, source: str) -> None:
        self.run.write_text(RunDir.BEST, bake(source, attempt.defines))
        launch = attempt.launch
        if launch is None:  # the input cases' launch: nothing to bake
            self.run.file(RunDir.BEST_LAUNCH).unlink(missing_ok=True)
        else:
            self.run.write_model(RunDir.BEST_LAUNCH, LaunchFile(**bake_launch(launch.to_data(), attempt.defines)))
        for old in self.run.path.glob(RunDir.BEST_CASES):
            old.unlink()
        best = self.trial.variant(source, launch, attempt.defines)
        for index, case in enumerate(self.cases):
            request = best.request(cases=[case], request_id=RunDir.best_case(index).removesuffix(".json"), vendor=True)
            self.run.write_model(RunDir.best_case(index), request)

    # --- the summary ---------------------------------------------------------------------

    def summary(self) -> Summary:
        exp = self.exp
        facts = RunFacts(run=self.run.path.name, strategy=self.strategy, description=exp.description,
                         signature=exp.signature_text, cases=self.cases, vendors=exp.vendors,
                         baseline_label=self.baseline_label, model=self.model, prices=self.prices,
                         kernelbench_changes=exp.kernelbench.changes if exp.kernelbench else None)
        return summarise(facts, self.attempts, self.calls, stop_reason=self.stop_reason, wall_seconds=self.wall(),
                         finalists=self.finalists, disqualified=sorted(self.disqualified), ablation=self.ablation,
                         audit=self.audit, before=self.before)

    def write_summary(self) -> Summary:
        summary = self.summary()
        self.run.write_model(RunDir.SUMMARY, summary)
        return summary

    def finish(self, stop_reason: str) -> Summary:
        self.stop_reason = stop_reason
        summary = self.write_summary()
        perf = [c.name for c in self.cases if c.role == "performance"]
        base = medians(self.baseline)
        rows = []
        for a in self.attempts:
            m = medians(a)
            ratios = [(m[c] / base[c]) if c in m and c in base else None for c in perf]
            label = f"#{a.id} {a.status}" + (f" {a.defines}" if a.defines and len(a.defines) <= 3 else "")
            rows.append(Row(label=label, ratios=ratios, failed=a.status != "ok"))
        draw(rows, perf, self.run.file(RunDir.HEATMAP_PNG), self.run.file(RunDir.HEATMAP_SVG))
        self.run.log(f"stopped: {summary.stop_reason}")
        return summary
