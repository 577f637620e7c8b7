"""The optimisation loop as a LangGraph graph: propose -> evaluate -> decide -> propose ...

The baseline (the initial kernel, attempt 0) is evaluated before the graph starts and is no
iteration. What counts: one *iteration* is one improvement attempt, i.e. one proposal turn. A
turn may involve several requests to the model (tool calls, retries); those count as model
calls, not iterations. A repair of a failed candidate is an iteration like any other. A
proposal that never becomes a candidate (garbage, wrong signature, model error) is recorded as
a rejected attempt and also counts. With ``agent+tune``, a proposal may declare tunables: every
configuration of it (at most ``MAX_SWEEP``) is evaluated; the first is the proposal's attempt,
the others are ``tune`` attempts whose parent is it; together they are one iteration.

The graph's state holds what the loop decides on (the proposal waiting to be evaluated, its
parent, a fatal model error, the stop reason); the recorder holds what happened (the audit pack).
"""

from __future__ import annotations

from typing import TypedDict

from ..record.events import AttemptStarted
from ..record.recorder import Recorder
from ..record.runs import Budget
from ..record.schema import ModelCall, ModelUsage
from . import prompts
from .instruments import Instruments
from .model import ModelClient
from .proposal import Proposal, ProposalError, parse

MAX_SWEEP = 16

MODEL_FAILURE = "model failure: "  # how a stop reason caused by the model begins (the CLI exits 5)
MODEL_ERROR = "model error: "  # how the reason of a proposal the model never gave begins


class State(TypedDict, total=False):
    pending: Proposal | None  # parsed, waiting to be evaluated
    parent: int | None  # the attempt the pending proposal improves or repairs
    calls: list[int]  # the model calls that produced it
    fatal_error: str  # a model error no retry can mend (refused credentials)
    stop_reason: str


class Optimizer:
    """Runs the graph over a recorder, with a model client."""

    def __init__(self, recorder: Recorder, client: ModelClient, budget: Budget, tune: bool = False,
                 research: bool = False, instruments: Instruments | None = None):
        self.rec = recorder
        self.client = client
        self.budget = budget
        self.tune = tune
        self.research = research
        self.instruments = instruments

    @property
    def iterations(self) -> int:
        return self.rec.count("proposal")

    def build(self):
        from langgraph.graph import END, START, StateGraph

        graph = StateGraph(State)
        graph.add_node("propose", self._propose)
        graph.add_node("evaluate", self._evaluate)
        graph.add_node("decide", self._decide)
        graph.add_edge(START, "decide")  # a resumed run may have nothing left to do
        graph.add_conditional_edges("propose", lambda s: "evaluate" if s.get("pending") else "decide",
                                    {"evaluate": "evaluate", "decide": "decide"})
        graph.add_edge("evaluate", "decide")
        graph.add_conditional_edges("decide", self._next, {"propose": "propose", "end": END})
        return graph.compile()

    def execute(self) -> str:
        """Run to a stop reason."""
        limit = 10 + 4 * (self.budget.max_iterations + 1)
        state = self.build().invoke({"pending": None, "fatal_error": ""}, {"recursion_limit": limit})
        return state["stop_reason"]

    def _next(self, state: State) -> str:
        return "end" if state.get("stop_reason") else "propose"

    def _propose(self, state: State) -> State:
        rec = self.rec
        attempt_id = len(rec.attempts)
        last = rec.attempts[-1] if rec.attempts else None
        best = rec.best
        repairing = last is not None and last.status not in ("ok", "rejected") and last.source_file is not None
        parent = last.id if repairing else (best.id if best else 0)
        rec.on_progress(AttemptStarted(id=attempt_id, what="proposing"))
        from_scratch = rec.baseline.source_file is None
        system = prompts.system_prompt(rec.exp.signature_text, rec.cases, tunables=self.tune,
                                       research=self.research,
                                       instruments=self.instruments.offered if self.instruments else (),
                                       from_scratch=from_scratch)
        vendor = rec.exp.primary_vendor
        user = prompts.task_message(
            rec.exp.description, rec.cases, rec.attempts, best, rec.baseline, rec.source(best),
            last, rec.source(last) if last and last.status != "ok" else None,
            self.budget.max_iterations - self.iterations,
            profile=self.instruments.stalled_card() if self.instruments else None,
            reference=(rec.exp.reference_path.name, rec.exp.reference_source) if from_scratch else None,
            vendor=vendor.label if vendor else "",
        )
        reply = self.client.ask(system, user, budget_left=lambda: not self._over_call_budget())
        call = ModelCall(
            id=len(rec.calls) + 1, attempt=attempt_id, model=self.client.settings.model,
            messages=reply.messages, response=reply.text, tool_calls=reply.tool_calls,
            usage=ModelUsage(input_tokens=reply.input_tokens, output_tokens=reply.output_tokens,
                             reasoning_tokens=reply.reasoning_tokens),
            cost_usd=self.client.cost(reply.input_tokens, reply.output_tokens),
            latency_s=reply.latency_s, requests=reply.calls, retries=reply.retries, error=reply.error,
        )
        rec.add_call(call)
        if reply.error:
            rec.reject(parent, f"{MODEL_ERROR}{reply.error}", [call.id])
            return {"pending": None, "fatal_error": reply.error if reply.fatal else ""}
        try:
            proposal = parse(reply.text, rec.exp.signature, rec.cases, allow_tunables=self.tune,
                             max_configurations=MAX_SWEEP)
        except ProposalError as exc:
            rec.reject(parent, str(exc), [call.id])
            return {"pending": None}
        return {"pending": proposal, "parent": parent, "calls": [call.id]}

    def _evaluate(self, state: State) -> State:
        proposal = state["pending"]
        rec = self.rec
        first = None
        for index, defines in enumerate(proposal.configurations or [{}]):
            rec.on_progress(AttemptStarted(id=len(rec.attempts), what="evaluating"))
            attempt = rec.evaluate("proposal" if index == 0 else "tune", proposal.source, proposal.launch,
                                   defines=defines, parent=state["parent"] if index == 0 else first.id,
                                   rationale=proposal.rationale, calls=state["calls"] if index == 0 else [])
            first = first or attempt
        return {"pending": None}

    def _decide(self, state: State) -> State:
        return {"stop_reason": self._stop_reason(state.get("fatal_error", ""))}

    def _stop_reason(self, fatal_error: str) -> str:
        b, rec = self.budget, self.rec
        if fatal_error:
            return f"{MODEL_FAILURE}{fatal_error}"
        errors = self._model_errors_in_a_row()
        if errors and errors >= b.max_model_errors:
            last = rec.attempts[-1].reason.removeprefix(MODEL_ERROR)
            return f"{MODEL_FAILURE}{errors} model errors in a row (last: {last})"
        if self.iterations >= b.max_iterations:
            return "iterations exhausted"
        if b.max_model_calls is not None and self._over_call_budget():
            return "model-call budget exhausted"
        if b.max_cost_usd is not None and rec.cost() >= b.max_cost_usd:
            return "cost budget exhausted"
        if b.time_limit_s is not None and rec.wall() >= b.time_limit_s:
            return "time limit reached"
        if b.patience is not None and self.iterations and rec.since_best("proposal") >= b.patience:
            return f"no improvement for {b.patience} attempts"
        return ""

    def _model_errors_in_a_row(self) -> int:
        count = 0
        for attempt in reversed(self.rec.attempts):
            if attempt.kind != "proposal" or not attempt.reason.startswith(MODEL_ERROR):
                break
            count += 1
        return count

    def _over_call_budget(self) -> bool:
        return self.budget.max_model_calls is not None and self.rec.model_calls() >= self.budget.max_model_calls
