"""The optimisation loop as a LangGraph graph: baseline -> propose -> evaluate -> decide -> ...

What counts: one *iteration* is one improvement attempt, i.e. one proposal turn. A turn may
involve several requests to the model (tool calls, retries); those count as model calls, not
iterations. A repair of a failed candidate is an iteration like any other. A proposal that
never becomes a candidate (garbage, wrong signature, model error) is recorded as a rejected
attempt and also counts. The baseline (the initial kernel) is attempt 0 and is no iteration.
"""

from __future__ import annotations

import datetime as dt
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol, TypedDict

from ..experiment import Experiment
from ..harness.protocol import EvalRequest, EvalResult, to_dict
from ..harness.stats import geomean
from ..record.rundir import RunDir
from ..record.schema import Attempt, CaseSummary, History, ModelCall, ModelUsage, Summary, Totals
from . import prompts
from .model import ModelClient, Reply
from .proposal import Proposal, ProposalError, parse

ROLES = {"correctness", "performance"}  # holdout cases are never evaluated here, never shown


class Evaluator(Protocol):
    def evaluate(self, request: EvalRequest, on_event: Callable[[dict], None] | None = None) -> EvalResult: ...

    def device_info(self) -> dict: ...


@dataclass
class Budget:
    max_iterations: int = 7
    max_model_calls: int | None = None
    max_cost_usd: float | None = None
    time_limit_s: float | None = None
    patience: int | None = None  # stop after this many attempts without a new best


class State(TypedDict, total=False):
    stop_reason: str
    pending: bool


def _now() -> str:
    return dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")


def score(result_cases: list[dict]) -> float | None:
    """Geometric mean of the performance medians when every case passed, else None."""
    if not result_cases or any(c["status"] != "ok" for c in result_cases):
        return None
    medians = [c["timing"]["median_us"] for c in result_cases if c["role"] == "performance" and c.get("timing")]
    return geomean(medians) if medians else None


class Optimizer:
    """Runs the graph; owns the run directory, the evaluator and the model client."""

    def __init__(self, experiment: Experiment, evaluator: Evaluator, client: ModelClient, run: RunDir,
                 budget: Budget, on_progress: Callable[[dict], None] = lambda event: None):
        self.exp = experiment
        self.evaluator = evaluator
        self.client = client
        self.run = run
        self.budget = budget
        self.on_progress = on_progress
        self.cases = experiment.cases(ROLES)
        self.attempts: list[Attempt] = []
        self.calls: list[ModelCall] = []
        self.pending: Proposal | None = None
        self.pending_parent: int | None = None
        self.pending_calls: list[int] = []
        self.started = time.monotonic()
        self.previous_wall = 0.0
        self.stop_reason = ""

    # --- resuming ------------------------------------------------------------------------

    def load(self) -> None:
        """Continue a run: attempts from history.json, model usage from model-NNN.json."""
        self.attempts = History.model_validate(self.run.read_json("history.json")).attempts
        self.calls = sorted(
            (ModelCall.model_validate_json(p.read_text()) for p in self.run.path.glob("model-*.json")),
            key=lambda c: c.id,
        )
        if self.run.file("summary.json").is_file():
            self.previous_wall = float(self.run.read_json("summary.json")["totals"]["wall_seconds"])
        self.run.log(f"resumed with {len(self.attempts)} attempt(s) and {len(self.calls)} model call(s)")

    # --- derived state -------------------------------------------------------------------

    @property
    def iterations(self) -> int:
        return sum(1 for a in self.attempts if a.kind == "proposal")

    @property
    def baseline(self) -> Attempt | None:
        return next((a for a in self.attempts if a.kind == "baseline"), None)

    @property
    def best(self) -> Attempt | None:
        scored = [a for a in self.attempts if a.score_us is not None]
        return min(scored, key=lambda a: (a.score_us, a.id)) if scored else None

    def model_calls(self) -> int:
        return sum(c.requests for c in self.calls)

    def cost(self) -> float:
        return sum(c.cost_usd for c in self.calls)

    def since_best(self) -> int:
        best = self.best
        last_id = best.id if best else 0
        return sum(1 for a in self.attempts if a.id > last_id)

    # --- the graph -----------------------------------------------------------------------

    def build(self):
        from langgraph.graph import END, START, StateGraph

        graph = StateGraph(State)
        graph.add_node("baseline", self._baseline)
        graph.add_node("propose", self._propose)
        graph.add_node("evaluate", self._evaluate)
        graph.add_node("decide", self._decide)
        graph.add_edge(START, "baseline")
        graph.add_conditional_edges("baseline", self._after_decide, {"propose": "propose", "end": END})
        graph.add_conditional_edges("propose", lambda s: "evaluate" if s.get("pending") else "decide",
                                    {"evaluate": "evaluate", "decide": "decide"})
        graph.add_edge("evaluate", "decide")
        graph.add_conditional_edges("decide", self._after_decide, {"propose": "propose", "end": END})
        return graph.compile()

    def execute(self) -> Summary:
        """Run to a stop reason (or an interrupt, recorded as such and re-raised)."""
        graph = self.build()
        limit = 10 + 4 * (self.budget.max_iterations + 1)
        try:
            graph.invoke({}, {"recursion_limit": limit})
        except KeyboardInterrupt:
            self.stop_reason = "interrupted"
            self.run.log("interrupted")
            self.finish()
            raise
        return self.finish()

    def _after_decide(self, state: State) -> str:
        return "end" if state.get("stop_reason") else "propose"

    def _baseline(self, state: State) -> State:
        if self.baseline is None:
            source = self.exp.initial_kernel_path.read_text()
            self.on_progress({"type": "attempt", "id": 0, "what": "baseline"})
            started = _now()
            self._record(0, None, "baseline", source, None, "", [], self._run_eval(source, None), started)
        return {"stop_reason": self._stop_reason()}

    def _propose(self, state: State) -> State:
        attempt_id = len(self.attempts)
        last = self.attempts[-1] if self.attempts else None
        best = self.best
        repairing = last is not None and last.status not in ("ok", "rejected") and last.source_file is not None
        parent = last.id if repairing else (best.id if best else 0)
        self.on_progress({"type": "attempt", "id": attempt_id, "what": "proposing"})
        system = prompts.system_prompt(self.exp.signature_text, self.cases)
        user = prompts.task_message(
            self.exp.description, self.cases, self.attempts, best, self.baseline,
            self._source(best), last, self._source(last) if last and last.status != "ok" else None,
            self.budget.max_iterations - self.iterations,
        )
        reply = self.client.ask(system, user, budget_left=lambda: not self._over_call_budget())
        call = self._record_call(attempt_id, reply)
        if reply.error:
            self._reject(attempt_id, parent, f"model error: {reply.error}", [call.id])
            return {"pending": False}
        try:
            proposal = parse(reply.text, self.exp.signature, self.cases)
        except ProposalError as exc:
            self._reject(attempt_id, parent, str(exc), [call.id])
            return {"pending": False}
        self.pending, self.pending_parent, self.pending_calls = proposal, parent, [call.id]
        return {"pending": True}

    def _evaluate(self, state: State) -> State:
        proposal, attempt_id = self.pending, len(self.attempts)
        assert proposal is not None
        self.on_progress({"type": "attempt", "id": attempt_id, "what": "evaluating"})
        started = _now()
        result = self._run_eval(proposal.source, proposal.launch)
        self._record(attempt_id, self.pending_parent, "proposal", proposal.source, to_dict(proposal.launch),
                     proposal.rationale, self.pending_calls, result, started)
        self.pending = None
        return {"pending": False}

    def _decide(self, state: State) -> State:
        return {"stop_reason": self._stop_reason()}

    # --- pieces --------------------------------------------------------------------------

    def _stop_reason(self) -> str:
        b = self.budget
        if self.iterations >= b.max_iterations:
            reason = "iterations exhausted"
        elif b.max_model_calls is not None and self._over_call_budget():
            reason = "model-call budget exhausted"
        elif b.max_cost_usd is not None and self.cost() >= b.max_cost_usd:
            reason = "cost budget exhausted"
        elif b.time_limit_s is not None and self.previous_wall + time.monotonic() - self.started >= b.time_limit_s:
            reason = "time limit reached"
        elif b.patience is not None and self.iterations and self.since_best() >= b.patience:
            reason = f"no improvement for {b.patience} attempts"
        else:
            return ""
        self.stop_reason = reason
        return reason

    def _over_call_budget(self) -> bool:
        return self.budget.max_model_calls is not None and self.model_calls() >= self.budget.max_model_calls

    def _run_eval(self, source: str, launch) -> EvalResult:
        request = self.exp.request(source, launch=launch, roles=ROLES, request_id=f"attempt-{len(self.attempts)}")
        return self.evaluator.evaluate(request, on_event=self._on_worker_event)

    def _on_worker_event(self, message: dict) -> None:
        if message.get("type") == "phase":
            self.on_progress({"type": "phase", "phase": message["phase"], "case": message.get("case", "")})

    def _source(self, attempt: Attempt | None) -> str | None:
        if attempt is None or attempt.source_file is None:
            return None
        return self.run.file(attempt.source_file).read_text()

    def _record_call(self, attempt_id: int, reply: Reply) -> ModelCall:
        call = ModelCall(
            id=len(self.calls) + 1, attempt=attempt_id, model=self.client.settings.model,
            messages=reply.messages, response=reply.text, tool_calls=reply.tool_calls,
            usage=ModelUsage(input_tokens=reply.input_tokens, output_tokens=reply.output_tokens,
                             reasoning_tokens=reply.reasoning_tokens),
            cost_usd=self.client.cost(reply.input_tokens, reply.output_tokens),
            latency_s=reply.latency_s, requests=reply.calls, retries=reply.retries, error=reply.error,
        )
        self.calls.append(call)
        self.run.write_text(f"model-{call.id:03d}.json", call.model_dump_json(indent=2))
        self.run.log(f"model call {call.id} for attempt {attempt_id}: {reply.input_tokens} in, "
                     f"{reply.output_tokens} out, {reply.latency_s} s" + (f", error: {reply.error}" if reply.error else ""))
        self.on_progress({"type": "usage", "tokens": sum(c.usage.input_tokens + c.usage.output_tokens for c in self.calls),
                          "cost": self.cost()})
        return call

    def _reject(self, attempt_id: int, parent: int, reason: str, calls: list[int]) -> None:
        now = _now()
        self._append(Attempt(id=attempt_id, parent=parent, kind="proposal", status="rejected", reason=reason,
                             model_calls=calls, started_at=now, finished_at=now))

    def _record(self, attempt_id: int, parent: int | None, kind: str, source: str, launch, rationale: str,
                calls: list[int], result: EvalResult, started: str) -> None:
        source_file = f"candidates/{attempt_id:03d}.cu"
        self.run.write_text(source_file, source)
        cases = [to_dict(c) for c in result.cases]
        reason = result.reason
        attempt = Attempt(
            id=attempt_id, parent=parent, kind=kind, status=result.status, reason=reason,
            source_file=source_file, launch=launch, rationale=rationale,
            compile=to_dict(result.compile) if result.compile else None, cases=cases,
            score_us=score(cases) if result.ok else None, model_calls=calls,
            eval_seconds=result.wall_s, started_at=started, finished_at=_now(),
        )
        self._append(attempt)
        if attempt.score_us is not None and self.best is attempt:
            self._write_best(attempt, source)

    def _append(self, attempt: Attempt) -> None:
        self.attempts.append(attempt)
        self.run.write_json("history.json", History(attempts=self.attempts).model_dump())
        self.run.log(f"attempt {attempt.id} ({attempt.kind}): {attempt.status}"
                     + (f", {attempt.score_us:.3f} us" if attempt.score_us else "")
                     + (f": {attempt.reason.splitlines()[0][:200]}" if attempt.status != "ok" and attempt.reason else ""))
        self.write_summary()
        best = self.best
        self.on_progress({"type": "done", "id": attempt.id, "status": attempt.status, "score": attempt.score_us,
                          "best": best.score_us if best else None, "best_id": best.id if best else None})

    def _write_best(self, attempt: Attempt, source: str) -> None:
        self.run.write_text("best.cu", source)
        launch = None
        if attempt.launch:
            from ..harness.protocol import LaunchSpec, from_dict

            launch = from_dict(LaunchSpec, attempt.launch)
        for old in self.run.path.glob("best-case-*.json"):
            old.unlink()
        for index, case in enumerate(self.cases):
            request = self.exp.request(source, launch=launch, roles=ROLES, request_id=f"best-case-{index}")
            request.cases = [case]
            self.run.write_json(f"best-case-{index}.json", to_dict(request))

    # --- the summary ---------------------------------------------------------------------

    def summary(self) -> Summary:
        baseline, best = self.baseline, self.best
        base_m, best_m = prompts.medians(baseline), prompts.medians(best)
        cases = []
        for case in self.cases:
            b, n = base_m.get(case.name), best_m.get(case.name)
            cases.append(CaseSummary(name=case.name, role=case.role, baseline_median_us=b, best_median_us=n,
                                     speedup=(b / n) if b and n else None))
        base_score = baseline.score_us if baseline else None
        best_score = best.score_us if best else None
        usage = Counter()
        for c in self.calls:
            usage.update(c.usage.model_dump())
        failed = Counter(a.status for a in self.attempts if a.status != "ok")
        return Summary(
            run=self.run.path.name, description=self.exp.description, signature=self.exp.signature_text,
            model=self.client.settings.public(), baseline_attempt=0,
            best_attempt=best.id if best else None, best_source_file="best.cu" if best else None,
            cases=cases, baseline_score_us=base_score, best_score_us=best_score,
            speedup=(base_score / best_score) if base_score and best_score else None,
            stop_reason=self.stop_reason or "running",
            attempts=len(self.attempts), valid=sum(1 for a in self.attempts if a.status == "ok"),
            rejected_by_reason=dict(failed),
            totals=Totals(
                model_calls=self.model_calls(), input_tokens=usage["input_tokens"],
                output_tokens=usage["output_tokens"], reasoning_tokens=usage["reasoning_tokens"],
                cost_usd=round(self.cost(), 6), gpu_seconds=round(sum(a.eval_seconds for a in self.attempts), 3),
                wall_seconds=round(self.previous_wall + time.monotonic() - self.started, 3),
            ),
            prices_usd_per_million_tokens=self.client.settings.prices.get(self.client.settings.name, {}),
        )

    def write_summary(self) -> Summary:
        summary = self.summary()
        self.run.write_json("summary.json", summary.model_dump())
        return summary

    def finish(self) -> Summary:
        from ..record.heatmap import Row, draw

        summary = self.write_summary()
        perf = [c.name for c in self.cases if c.role == "performance"]
        base = prompts.medians(self.baseline)
        rows = []
        for a in self.attempts:
            m = prompts.medians(a)
            ratios = [(m[c] / base[c]) if c in m and c in base else None for c in perf]
            rows.append(Row(label=f"#{a.id} {a.status}", ratios=ratios, failed=a.status != "ok"))
        draw(rows, perf, self.run.file("heatmap.png"), self.run.file("heatmap.svg"))
        self.run.log(f"stopped: {summary.stop_reason}")
        return summary
