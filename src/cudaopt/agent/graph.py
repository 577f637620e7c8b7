"""The optimisation loop as a LangGraph graph: propose -> evaluate -> decide -> propose ...

The baseline (the initial kernel, attempt 0) is evaluated before the graph starts and is no
iteration. What counts: one *iteration* is one improvement attempt, i.e. one proposal turn. A
turn may involve several requests to the model (tool calls, retries); those count as model
calls, not iterations. A repair of a failed candidate is an iteration like any other. A
proposal that never becomes a candidate (garbage, wrong signature, model error) is recorded as
a rejected attempt and also counts. With ``agent+tune``, a proposal may declare tunables: every
configuration of it (at most ``MAX_SWEEP``) is evaluated; the first is the proposal's attempt,
the others are ``tune`` attempts whose parent is it; together they are one iteration.

With ``proposals`` K > 1, each round asks the model for K proposals at once (K turns in
parallel, each counted as an iteration) and evaluates all their candidates together on every
GPU; the best of them, like any best, is the parent of the next round. A round asks for no
more proposals than the iterations and model calls left. Turn i of a round repairs the failure
of turn i of the previous round, or improves the best. A round records its model calls in turn
order, then its rejected answers, then its candidates.

The graph's state holds what the loop decides on (the proposals waiting to be evaluated, a
fatal model error, the stop reason); the recorder holds what happened (the run directory).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import TypedDict

from ..engine.recorder import Candidate, Recorder
from ..wire.launch import device_facts
from ..record.events import AttemptStarted
from ..record.runs import Budget
from ..record.files import Attempt, ModelCall, ModelUsage
from . import prompts
from .instruments import Instruments
from .model import ModelClient, Reply
from .proposal import Proposal, ProposalError, parse

MAX_SWEEP = 16

MODEL_FAILURE = "model failure: "  # how a stop reason caused by the model begins (the CLI exits 5)
MODEL_ERROR = "model error: "  # how the reason of a proposal the model never gave begins


@dataclass
class Pending:
    """A parsed proposal waiting to be evaluated."""

    proposal: Proposal
    parent: int  # the attempt it improves or repairs
    calls: list[int]  # the model calls that produced it
    turn: int  # its place in the round


class State(TypedDict, total=False):
    pending: list[Pending]
    fatal_error: str  # a model error no retry can mend (refused credentials)
    stop_reason: str


@dataclass
class Optimizer:
    """Runs the graph over a recorder, with a model client."""

    rec: Recorder
    client: ModelClient
    budget: Budget
    tune: bool = False
    research: bool = False
    instruments: Instruments | None = None
    proposals: int = 1
    _lasts: list[Attempt | None] = field(default_factory=list, init=False)  # per turn of the last round: its end

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
        state = self.build().invoke({"pending": [], "fatal_error": ""}, {"recursion_limit": limit})
        return state["stop_reason"]

    def _next(self, state: State) -> str:
        return "end" if state.get("stop_reason") else "propose"

    def _round_size(self) -> int:
        """Proposals this round: K, or fewer when fewer iterations or model calls are left."""
        size = min(self.proposals, self.budget.max_iterations - self.iterations)
        if self.budget.max_model_calls is not None:
            size = min(size, self.budget.max_model_calls - self.rec.model_calls())
        return max(1, size)

    def _propose(self, state: State) -> State:
        rec = self.rec
        size = self._round_size()
        base = len(rec.attempts)
        lasts = self._lasts or [rec.attempts[-1] if rec.attempts else None]
        best = rec.best
        rec.on_progress(AttemptStarted(id=base, what="proposing" if size == 1 else f"proposing {size} kernels"))
        from_scratch = rec.baseline.source_file is None  # no initial kernel: the model writes the first
        system = prompts.system_prompt(rec.exp.signature_text, rec.cases, tunables=self.tune,
                                       research=self.research,
                                       instruments=self.instruments.offered if self.instruments else (),
                                       from_scratch=from_scratch, limits=rec.exp.limits)
        profile = self.instruments.stalled_card() if self.instruments else None
        vendor = rec.exp.primary_vendor
        parents, users = [], []
        for turn in range(size):
            last = lasts[turn % len(lasts)]
            repairing = last is not None and last.status not in ("ok", "rejected") and last.source_file is not None
            parents.append(last.id if repairing else (best.id if best else 0))
            users.append(prompts.task_message(
                rec.exp.description, rec.cases, rec.attempts, best, rec.baseline, rec.source(best),
                last, rec.source(last) if last and last.status != "ok" else None,
                self.budget.max_iterations - self.iterations, profile=profile,
                reference=(rec.exp.reference_path.name, rec.exp.reference_source) if from_scratch else None,
                vendor=vendor.label if vendor else "",
            ) + prompts.round_note(turn, size))
        replies = self._ask(system, users)
        outcomes = [self._outcome(reply) for reply in replies]
        rejected = [turn for turn, outcome in enumerate(outcomes) if isinstance(outcome, str)]
        attempt_ids, next_id = {}, base + len(rejected)
        for turn, outcome in enumerate(outcomes):
            if isinstance(outcome, str):
                attempt_ids[turn] = base + rejected.index(turn)
            else:
                attempt_ids[turn] = next_id
                next_id += len(outcome.configurations or [{}])
        calls = [self._record_call(reply, attempt_ids[turn]) for turn, reply in enumerate(replies)]
        self._lasts = [None] * size
        pending = []
        for turn, outcome in enumerate(outcomes):
            if isinstance(outcome, str):
                self._lasts[turn] = rec.reject(parents[turn], outcome, [calls[turn]])
            else:
                pending.append(Pending(outcome, parents[turn], [calls[turn]], turn))
        fatal = next((reply.error for reply in replies if reply.error and reply.fatal), "")
        return {"pending": pending, "fatal_error": fatal}

    def _outcome(self, reply: Reply) -> Proposal | str:
        """The proposal in a reply, or why there is none (a rejection's reason)."""
        if reply.error:
            return f"{MODEL_ERROR}{reply.error}"
        try:
            return parse(reply.text, self.rec.exp.signature, self.rec.cases, allow_tunables=self.tune,
                         max_configurations=MAX_SWEEP, device=device_facts(self.rec.evaluator.device_info()))
        except ProposalError as exc:
            return str(exc)

    def _ask(self, system: str, users: list[str]) -> list[Reply]:
        """The model's answers, one per turn; the turns of a round are asked at the same time."""
        def ask(user: str) -> Reply:
            return self.client.ask(system, user, budget_left=lambda: not self._over_call_budget())

        if len(users) == 1:
            return [ask(users[0])]
        answers: list = [None] * len(users)

        def turn(i: int) -> None:
            try:
                answers[i] = ask(users[i])
            except BaseException as exc:  # re-raised below, in the loop's own thread
                answers[i] = exc

        # daemon threads: Ctrl-C stops the run at once instead of waiting for the model's answers
        threads = [threading.Thread(target=turn, args=(i,), daemon=True) for i in range(len(users))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        failed = next((a for a in answers if isinstance(a, BaseException)), None)
        if failed is not None:
            raise failed
        return answers

    def _record_call(self, reply: Reply, attempt_id: int) -> int:
        rec = self.rec
        call = ModelCall(
            id=len(rec.calls) + 1, attempt=attempt_id, model=self.client.settings.model,
            messages=reply.messages, response=reply.text, tool_calls=reply.tool_calls,
            usage=ModelUsage(input_tokens=reply.input_tokens, output_tokens=reply.output_tokens,
                             reasoning_tokens=reply.reasoning_tokens),
            cost_usd=self.client.cost(reply.input_tokens, reply.output_tokens),
            latency_s=reply.latency_s, requests=reply.calls, retries=reply.retries, error=reply.error,
        )
        rec.add_call(call)
        return call.id

    def _evaluate(self, state: State) -> State:
        """Every candidate of the round's proposals (each with its configurations), on every GPU."""
        rec = self.rec
        base = len(rec.attempts)
        candidates, groups = [], []
        for pending in state["pending"]:
            first = base + len(candidates)
            proposal = pending.proposal
            for index, defines in enumerate(proposal.configurations or [{}]):
                candidates.append(Candidate("proposal" if index == 0 else "tune", proposal.source, proposal.launch,
                                            dict(defines), parent=pending.parent if index == 0 else first,
                                            rationale=proposal.rationale, calls=pending.calls if index == 0 else []))
            groups.append((pending.turn, base + len(candidates) - 1))
        attempts = rec.evaluate_many(candidates)
        if [a.id for a in attempts] != list(range(base, base + len(candidates))):
            raise RuntimeError("the round's attempts were not recorded in order")  # ids were promised to the calls
        for turn, last in groups:
            self._lasts[turn] = rec.attempts[last]
        return {"pending": []}

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
