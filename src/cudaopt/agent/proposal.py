"""Turning a model's answer into a candidate, or into a recorded rejection with its reason.

The model is asked for one fenced ``cuda`` block (the complete kernel source) and one fenced
``json`` block (launch configuration as expressions over the case scalars, and a rationale).
A single JSON object carrying ``source`` is accepted too. Anything else — prose only, broken
JSON, a missing field, another entry name or signature, host code — becomes a
:class:`ProposalError` whose message is recorded and fed back.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..crosschecks import check_launch
from ..errors import ExperimentError
from ..wire import expr
from ..wire.launch import NOMINAL_DEVICE, candidate_names, tunable_clashes
from ..wire.protocol import CaseSpec, LaunchSpec
from ..wire.signature import Signature, SignatureError, entry_names, find_entry
from ..config import SpaceError, TuneSpace


class ProposalError(ValueError):
    """A model answer that cannot become a candidate; the message says why."""

class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    launch: LaunchSpec
    rationale: str = Field(default="", max_length=4000)
    source: str | None = None
    tunables: dict[str, list[int | float | str]] | None = None
    restrictions: list[str] = Field(default_factory=list)


@dataclass
class Proposal:
    source: str
    launch: LaunchSpec
    rationale: str
    configurations: list[dict] = field(default_factory=list)  # tunable values to sweep (agent+tune)


_FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.DOTALL)
_HOST_CODE = [
    (re.compile(r"\bint\s+main\s*\("), "defines main()"),
    (re.compile(r"<<<"), "launches kernels from host code (<<<...>>>)"),
    (re.compile(r"\bcuda(Malloc|Memcpy|Free|DeviceSynchronize|LaunchKernel|StreamCreate)\w*\s*\("),
     "calls the CUDA runtime from host code"),
    (re.compile(r"#\s*include\s*<(iostream|fstream|thread|cstdlib|stdlib\.h|unistd\.h)>"), "includes host-only headers"),
]


def parse(text: str, signature: Signature, cases: list[CaseSpec], allow_tunables: bool = False,
          max_configurations: int = 16, device: Mapping = NOMINAL_DEVICE) -> Proposal:
    """Parse and validate a model answer against the experiment's signature and cases (its launch
    resolved with ``device``'s facts, e.g. ``num_sms``)."""
    if not text or not text.strip():
        raise ProposalError("empty answer")
    blocks = _FENCE.findall(text)
    json_text = next((body for lang, body in blocks if lang.lower() == "json"), None)
    if json_text is not None:
        try:
            data = json.loads(json_text)
        except json.JSONDecodeError as exc:
            raise ProposalError(f"the JSON block is not valid JSON: {exc.msg} (line {exc.lineno})") from None
        except (ValueError, RecursionError) as exc:  # a number of thousands of digits, nesting thousands deep
            raise ProposalError(f"the JSON block is not valid JSON: {str(exc)[:120]}") from None
    else:
        data = _bare_json(text)
    if data is None:
        raise ProposalError("no JSON block with the launch configuration found in the answer")
    try:
        answer = _Answer.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise ProposalError(f"the JSON block is missing or has a bad field '{field}': {err['msg']}") from None
    source = answer.source or next(
        (body for lang, body in blocks if lang.lower() in ("cuda", "cu", "c++", "cpp", "c")), None
    )
    if not source or not source.strip():
        raise ProposalError("no ```cuda block with the kernel source found in the answer")
    check_source(source, signature)
    if answer.tunables:
        clashes = tunable_clashes(answer.tunables, signature, {n for c in cases for n in c.scalars})
        if clashes:
            raise ProposalError(f"bad tunables: {'; '.join(clashes)}; give tunables names of their own")
    configurations = _configurations(answer, allow_tunables, max_configurations)
    launch = answer.launch
    for config in configurations or [{}]:
        for case in cases:  # the launch must resolve on every case the model may see, within a GPU's limits
            where = f" with {config}" if config else ""
            try:
                check_launch("launch", "", launch, case, names=candidate_names(case.scalars, config, device),
                             kernel=(source, signature), device=dict(device))
            except ExperimentError as exc:
                why = exc.message.removeprefix(f"case {case.name!r}: ")
                raise ProposalError(f"launch configuration for case {case.name!r}{where}: {exc.field}: {why}") from None
    return Proposal(source=source, launch=launch, rationale=answer.rationale.strip(), configurations=configurations)


def _configurations(answer: _Answer, allowed: bool, limit: int) -> list[dict]:
    if not answer.tunables:
        return []
    if not allowed:
        raise ProposalError("tunables are only swept with --strategy agent+tune; give fixed values in the source")

    try:
        space = TuneSpace(tunables=answer.tunables, restrictions=answer.restrictions)
    except (ValidationError, expr.ExprError) as exc:
        raise ProposalError(f"bad tunables: {exc}".splitlines()[0]) from None
    try:
        configs = space.configurations(limit)  # a SpaceError past the limit, never built beyond it
    except SpaceError as exc:
        raise ProposalError(f"bad tunables: {exc}; at most {limit} configurations are swept") from None
    if not configs:
        raise ProposalError("no combination of the tunables satisfies the restrictions")
    return configs


def check_source(source: str, signature: Signature) -> None:
    for pattern, what in _HOST_CODE:
        if pattern.search(source):
            raise ProposalError(f"the source {what}; only device code is accepted")
    try:
        declared = find_entry(source, signature.name)
    except SignatureError as exc:
        raise ProposalError(f"the entry point cannot be parsed: {exc}") from None
    if declared is None:
        found = entry_names(source)
        also = f" (found: {', '.join(found)})" if found else ""
        raise ProposalError(f"no 'extern \"C\" __global__ void {signature.name}(...)' in the source{also}")
    if not declared.same_types(signature):
        raise ProposalError(f"the entry is declared as '{declared}', but the signature must be '{signature}'")


def _bare_json(text: str) -> dict | None:
    """The first JSON object written in prose, if any."""
    decoder = json.JSONDecoder()
    start = text.find("{")
    while start != -1:
        try:
            value, _ = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            value = None
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    return None
