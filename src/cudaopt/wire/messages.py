"""The worker's message stream, one JSON object per line, typed.

Into the worker: an :class:`~.protocol.EvalRequest`, or a :class:`Prefetch` (kernels a sweep
will ask for, to compile ahead; no answer). Out of it, in this order per request: ``phase``
messages as the request progresses (the supervisor applies each phase's timeout), ``compiled``
and ``case`` messages as partial results (what finished survives a hang or a crash later), and
one ``result``. ``ready`` comes once at start, ``fatal`` when the GPU cannot be initialised.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from .protocol import EvalRequest, KernelSpec, WireModel
from .results import CaseResult, CompileInfo, DeviceInfo, EvalResult

Phase = Literal["compile", "check", "launch", "timing"]  # launch: the candidate's checked launches


class Ready(WireModel):
    type: Literal["ready"] = "ready"
    device: DeviceInfo


class Fatal(WireModel):
    type: Literal["fatal"] = "fatal"
    message: str


class PhaseStarted(WireModel):
    type: Literal["phase"] = "phase"
    phase: Phase
    case: str = ""
    reference_s: float | None = None  # launch: how long the reference took on this case, a measure of the launch


class Compiled(WireModel):
    type: Literal["compiled"] = "compiled"
    compile: CompileInfo


class CaseDone(WireModel):
    type: Literal["case"] = "case"
    case: CaseResult


class Done(WireModel):
    type: Literal["result"] = "result"
    result: EvalResult


WorkerMessage = Annotated[Ready | Fatal | PhaseStarted | Compiled | CaseDone | Done, Field(discriminator="type")]
_OUT = TypeAdapter(WorkerMessage)


def read_message(line: str | bytes) -> WorkerMessage:
    """One message from the worker (raises pydantic's ValidationError on anything else)."""
    return _OUT.validate_json(line)


class Prefetch(WireModel):
    prefetch: list[KernelSpec]


_IN = TypeAdapter(EvalRequest | Prefetch)


def read_order(line: str | bytes) -> EvalRequest | Prefetch:
    """One line to the worker: a request or a prefetch."""
    return _IN.validate_json(line)
