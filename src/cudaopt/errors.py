"""The errors a user can act on, each with its exit status (``cli/app.py``'s ``command`` maps them,
in one place).

``ExperimentError`` is bad input: a file, a field and what is wrong with it, on one line.
"""

from __future__ import annotations

import re
from pathlib import Path


class ExperimentError(Exception):
    """Bad input: ``file: field: message``."""

    def __init__(self, file: str | Path, field: str, message: str):
        self.file, self.field, self.message = str(file), field, message
        super().__init__(f"{file}: {field}: {message}" if field else f"{file}: {message}")


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


def validation_message(exc) -> tuple[str, str]:
    """The field and message of a pydantic ``ValidationError``'s first problem, in plain words:
    the alternatives of a union are said together (``an integer, a number or a string``), never
    as the validator's type names."""
    errors = exc.errors()
    field = _field(errors[0]["loc"])
    same = [e for e in errors if _field(e["loc"]) == field]
    if len(same) > 1 and all(e["type"].endswith(("_type", "_parsing")) for e in same):
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
