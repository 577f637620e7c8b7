"""The strategy interface and its registry (strategies/__init__.py says how to add one)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

from ..engine.recorder import Candidate, Recorder
from ..record.runs import Budget


@dataclass
class Context:
    """What a strategy gets: the run (through its recorder) and the options it was started with."""

    recorder: Recorder
    budget: Budget
    model: Any = None  # agent.model.ModelSettings for strategies that need a model
    chat_model: Any = None  # a chat model to use instead of building one (scripted models in tests)
    max_evals: int = 40
    seed: int = 0
    research: bool = False
    use_nsight: bool = False
    device_index: int = 0  # the local GPU the instruments profile on
    proposals: int = 1  # proposals asked of the model per round (agent strategies)


class Strategy(Protocol):
    needs_model: bool  # the CLI checks credentials before any GPU work when True
    needs_initial_kernel: bool  # False: it can write the first kernel itself (a model from the description)

    def check(self, experiment, origin: str) -> None:
        """Raise ExperimentError (bad input) when the experiment cannot be run this way."""

    def ahead(self, ctx: Context) -> list[Candidate]:
        """The candidates it will measure first, as one batch, when it knows them before the
        baseline is measured (a sweep does): they compile while the baseline runs."""

    def run(self, ctx: Context) -> str:
        """Evaluate candidates until a budget runs out; return the stop reason."""


REGISTRY: dict[str, type] = {}
AUTO = "auto"


def register(name: str):
    def add(cls: type) -> type:
        REGISTRY[name] = cls
        cls.name = name
        return cls

    return add


def names() -> tuple[str, ...]:
    return (AUTO, *REGISTRY)


def get(name: str) -> Strategy:
    return REGISTRY[name]()


def choose(requested: str, credentials_problem: str | None, model: str) -> tuple[str, str]:
    """The strategy ``auto`` stands for (``agent+tune`` with a model's credentials, else ``tune``),
    and why; any other name as given."""
    if requested != AUTO:
        return requested, ""
    if credentials_problem:
        return "tune", f"no model: {credentials_problem}"
    return "agent+tune", f"{model} is configured"

