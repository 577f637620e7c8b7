"""The errors a user can act on, each with its exit status (cli.py maps them, in one place).

``ExperimentError`` is bad input: a file, a field and what is wrong with it, on one line.
"""

from __future__ import annotations

from pathlib import Path


class ExperimentError(Exception):
    """Bad input: ``file: field: message``."""

    def __init__(self, file: str | Path, field: str, message: str):
        self.file, self.field, self.message = str(file), field, message
        super().__init__(f"{file}: {field}: {message}" if field else f"{file}: {message}")


def validation_message(exc) -> tuple[str, str]:
    """The field and message of a pydantic ``ValidationError``'s first problem."""
    err = exc.errors()[0]
    field = ""
    for part in err["loc"]:
        field += f"[{part}]" if isinstance(part, int) else f"{'.' if field else ''}{part}"
    field = field or "(top level)"
    message = err["msg"].removeprefix("Value error, ")
    if len(exc.errors()) > 1:
        message += f" (and {len(exc.errors()) - 1} more problem(s))"
    return field, message
