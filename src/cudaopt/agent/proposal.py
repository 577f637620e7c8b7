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
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..experiment import LaunchModel
from ..harness import expr
from ..harness.protocol import CaseSpec, LaunchSpec
from ..harness.runner import resolve_launch
from ..harness.signature import Signature, SignatureError, find_entry


class ProposalError(ValueError):
    """A model answer that cannot become a candidate; the message says why."""


class _Answer(BaseModel):
    model_config = ConfigDict(extra="ignore")
    launch: LaunchModel
    rationale: str = Field(default="", max_length=4000)
    source: str | None = None


@dataclass
class Proposal:
    source: str
    launch: LaunchSpec
    rationale: str


_FENCE = re.compile(r"```([A-Za-z0-9_+-]*)[ \t]*\n(.*?)```", re.S)
_HOST_CODE = [
    (re.compile(r"\bint\s+main\s*\("), "defines main()"),
    (re.compile(r"<<<"), "launches kernels from host code (<<<...>>>)"),
    (re.compile(r"\bcuda(Malloc|Memcpy|Free|DeviceSynchronize|LaunchKernel|StreamCreate)\w*\s*\("),
     "calls the CUDA runtime from host code"),
    (re.compile(r"#\s*include\s*<(iostream|fstream|thread|cstdlib|stdlib\.h|unistd\.h)>"), "includes host-only headers"),
]


def parse(text: str, signature: Signature, cases: list[CaseSpec]) -> Proposal:
    """Parse and validate a model answer against the experiment's signature and cases."""
    if not text or not text.strip():
        raise ProposalError("empty answer")
    blocks = _FENCE.findall(text)
    json_text = next((body for lang, body in blocks if lang.lower() == "json"), None)
    if json_text is None:
        json_text = _bare_json(text)
    if json_text is None:
        raise ProposalError("no JSON block with the launch configuration found in the answer")
    try:
        data = json.loads(json_text)
    except json.JSONDecodeError as exc:
        raise ProposalError(f"the JSON block is not valid JSON: {exc.msg} (line {exc.lineno})") from None
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
    launch = answer.launch.spec()
    for case in cases:  # the launch must resolve on every case the model may see
        try:
            resolve_launch(launch, dict(case.scalars))
        except (ValueError, expr.ExprError) as exc:
            raise ProposalError(f"launch configuration does not work for case {case.name!r}: {exc}") from None
    return Proposal(source=source, launch=launch, rationale=answer.rationale.strip())


def check_source(source: str, signature: Signature) -> None:
    for pattern, what in _HOST_CODE:
        if pattern.search(source):
            raise ProposalError(f"the source {what}; only device code is accepted")
    try:
        declared = find_entry(source, signature.name)
    except SignatureError as exc:
        raise ProposalError(f"the entry point cannot be parsed: {exc}") from None
    if declared is None:
        found = re.findall(r'extern\s+"C"\s+__global__\s+void\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)', source)
        also = f" (found: {', '.join(found)})" if found else ""
        raise ProposalError(f"no 'extern \"C\" __global__ void {signature.name}(...)' in the source{also}")
    if not declared.same_types(signature):
        raise ProposalError(f"the entry is declared as '{declared}', but the signature must be '{signature}'")


def _bare_json(text: str) -> str | None:
    """The first balanced {...} object in prose, if any."""
    start = text.find("{")
    while start != -1:
        depth = 0
        in_string = escape = False
        for i in range(start, len(text)):
            ch = text[i]
            if in_string:
                if escape:
                    escape = False
                elif ch == "\\":
                    escape = True
                elif ch == '"':
                    in_string = False
                continue
            if ch == '"':
                in_string = True
            elif ch == "{":
                depth += 1
            elif ch == "}":
                depth -= 1
                if depth == 0:
                    return text[start:i + 1]
        start = text.find("{", start + 1)
    return None
