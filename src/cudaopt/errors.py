"""The errors a user can act on, each with its exit status (``cli/app.py``'s ``command`` maps them,
in one place; the README's table lists them).

``ExperimentError`` is bad input (exit 2): a file, or an argument named as its command's flag
(``--launch``), a field and what is wrong with it, on one line. ``WorkerError`` is no GPU worker
(exit 3). Both are raised the same way whichever door a user takes, the Python API or the CLI.
"""

from __future__ import annotations

import difflib
import re
import types
import typing
from collections.abc import Iterable
from pathlib import Path


class ExperimentError(Exception):
    """Bad input: ``file: field: message``."""

    def __init__(self, file: str | Path, field: str, message: str):
        self.file, self.field, self.message = str(file), field, message
        super().__init__(f"{file}: {field}: {message}" if field else f"{file}: {message}")


class WorkerError(RuntimeError):
    """A GPU worker that could not start or stopped answering."""


def did_you_mean(word: str, known: Iterable[str]) -> str:
    """`` (did you mean 'timing'?)`` for the known name closest to a mistyped one; empty when none is close."""
    close = difflib.get_close_matches(word, list(known), n=1, cutoff=0.6)
    return f" (did you mean {close[0]!r}?)" if close else ""


def newer_schema(found, readable: int) -> str:
    """What a file made by a newer cudaopt is told: which version it is, which this one reads."""
    return f"made by a newer cudaopt (schema_version {found}; this one reads up to {readable}): upgrade cudaopt"


def shortened(text: str, limit: int = 300) -> str:
    """``text`` on one line, at most about ``limit`` characters, ended at a sentence or a word:
    never cut mid-word (a long message says where it was shortened)."""
    flat = " ".join(str(text).split())
    if len(flat) <= limit:
        return flat
    head = flat[:limit]
    end = max(head.rfind(". "), head.rfind("; "))
    return head[:end + 1] if end > limit // 2 else head.rsplit(" ", 1)[0] + " (…)"


_TYPE_WORDS = {"int": "an integer", "float": "a number", "str": "a string", "bool": "true or false",
               "list": "a list", "dict": "an object", "none": "null"}


def _is_type_tag(part) -> bool:
    """A location part pydantic adds for a member of a union (``int``, ``list[...]``,
    ``function-after[...]``): the validator's inner workings, not a field the user wrote."""
    return isinstance(part, str) and (part in _TYPE_WORDS or "[" in part or part.startswith(("function-", "constrained-")))


def _field(loc) -> str:
    field = ""
    for part in loc:
        if _is_type_tag(part):
            continue
        field += f"[{part}]" if isinstance(part, int) else f"{'.' if field else ''}{part}"
    return field


def _members(annotation) -> list:
    """The types an annotation may hold: a union's members, ``Annotated``'s inner type."""
    origin = typing.get_origin(annotation)
    if origin is typing.Annotated:
        return _members(typing.get_args(annotation)[0])
    if origin is typing.Union or origin is types.UnionType:
        return [m for arg in typing.get_args(annotation) for m in _members(arg)]
    return [annotation]


def _step(annotation, part) -> list:
    """The types found one location part below ``annotation`` (a model's field, a list's item,
    a dict's value)."""
    found = []
    for member in _members(annotation):
        origin, args = typing.get_origin(member), typing.get_args(member)
        if isinstance(member, type) and hasattr(member, "model_fields"):
            if isinstance(part, str) and part in member.model_fields:
                found.append(member.model_fields[part].annotation)
        elif origin in (list, tuple) and isinstance(part, int) and args:
            found.append(args[0])
        elif origin is dict and isinstance(part, str) and len(args) == 2:
            found.append(args[1])
    return found


def known_keys(model, loc) -> list[str]:
    """The keys a file may hold where ``loc`` (a pydantic error's location) points, read from the
    schema ``model``: what an unknown key is compared with."""
    current = [model]
    for part in loc:
        if not _is_type_tag(part):
            current = [t for c in current for t in _step(c, part)]
    return sorted({name for c in current for m in _members(c)
                   if isinstance(m, type) and hasattr(m, "model_fields") for name in m.model_fields})


def _unknown_key(loc, model) -> str:
    """An unknown key (the field names it) said with the closest known one, else the known ones."""
    known = known_keys(model, loc[:-1]) if model is not None else []
    close = difflib.get_close_matches(str(loc[-1]), known, n=1, cutoff=0.6)
    if close:
        return f"not a known key: did you mean {close[0]!r}?"
    return f"not a known key (known: {', '.join(known)})" if known else "not a known key"


def _special(error, model) -> str | None:
    """A message of our own for what pydantic words for its own reader: an unknown key (with the
    closest known one) and a file from a newer cudaopt."""
    loc = error["loc"]
    if error["type"] == "extra_forbidden" and loc:
        return _unknown_key(loc, model)
    if error["type"] == "less_than_equal" and loc and loc[-1] == "schema_version":
        return newer_schema(error.get("input"), error["ctx"]["le"])
    return None


def validation_message(exc, model=None) -> tuple[str, str]:
    """The field and message of a pydantic ``ValidationError``'s first problem, in plain words:
    the alternatives of a union are said together (``an integer, a number or a string``), never
    as the validator's type names; an unknown field of ``model`` names the closest known one."""
    errors = exc.errors()
    unknown = [e for e in errors if e["type"] == "extra_forbidden" and e["loc"]]
    if unknown:  # a mistyped key first: it is why the key it meant is missing (`shapee` for `shape`)
        meant = {(*e["loc"][:-1], close) for e in unknown
                 for close in difflib.get_close_matches(str(e["loc"][-1]), known_keys(model, e["loc"][:-1])
                                                        if model is not None else [], n=1, cutoff=0.6)}
        errors = [*unknown, *(e for e in errors if e["type"] != "extra_forbidden"
                              and not (e["type"] == "missing" and tuple(e["loc"]) in meant))]
    field = _field(errors[0]["loc"])
    same = [e for e in errors if _field(e["loc"]) == field]
    special = _special(errors[0], model)
    if special is not None:
        message = special
    elif len(same) > 1 and all(e["type"].endswith(("_type", "_parsing")) for e in same):
        kinds = []
        for err in same:
            tag = next((p for p in reversed(err["loc"]) if _is_type_tag(p)), None)
            kind = _TYPE_WORDS.get(str(tag).split("[")[0], "an object") if tag else err["msg"]
            if kind not in kinds:
                kinds.append(kind)
        got = same[0].get("input")
        shown = repr(got) if isinstance(got, (str, int, float, bool)) or got is None else type(got).__name__
        message = f"{shown} should be {', '.join(kinds[:-1])} or {kinds[-1]}" if len(kinds) > 1 else \
            same[0]["msg"].removeprefix("Value error, ")
    else:
        message = re.sub(r" or instance of \w+", "", errors[0]["msg"].removeprefix("Value error, "))
        message = message.replace("a valid dictionary", "an object (a JSON {...})")
    others = len({_field(e["loc"]) for e in errors} - {field})
    if others:
        message += f" (and {others} more problem(s))"
    return field, message
