"""Reading the user's files: missing, unreadable, not text or not JSON is bad input naming the
file (and the field). experiment.py reads an experiment's files with these and hands what it
read to crosschecks.py; the run directory, guard files, request files and launch files
(``--launch``, ``best-launch.json``) are read with them too.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from .errors import ExperimentError, shortened, validation_message
from .wire.fields import version_field
from .wire.protocol import LaunchSpec


def missing_file(path: Path) -> str | None:
    """Why ``path`` names no file to read (None when it does): not found, a folder, or a name the
    operating system refuses (too long, say)."""
    try:
        if path.is_file():
            return None
        return "is a folder, not a file" if path.is_dir() else "not found"
    except (OSError, ValueError) as exc:
        return f"is no usable path: {getattr(exc, 'strerror', None) or exc}"


def read_json_file(path: Path, what: str) -> Any:
    why = missing_file(path)
    if why is not None:
        raise ExperimentError(path, "", f"{what} not found" if why == "not found" else f"{what}: {why}")
    try:
        return json.loads(path.read_text())
    except json.JSONDecodeError as exc:
        raise ExperimentError(path, f"line {exc.lineno}", f"not valid JSON: {exc.msg}") from None
    except UnicodeDecodeError:
        raise ExperimentError(path, "", "not a UTF-8 text file (JSON is text)") from None
    except OSError as exc:
        raise ExperimentError(path, "", f"cannot be read: {exc.strerror or exc}") from None
    except (ValueError, RecursionError) as exc:  # a number of thousands of digits, nesting thousands deep
        raise ExperimentError(path, "", f"not valid JSON: {shortened(str(exc), 120)}") from None


def read_model_file(path: Path, model, what: str):
    """A JSON file validated as ``model``; missing, unreadable, broken or invalid is bad input
    naming the file and the field."""
    data = read_json_file(path, what)
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise ExperimentError(path, *validation_message(exc, model)) from None


def read_text_file(path: Path, field: str) -> str:
    """A source file's text; a binary or non-UTF-8 file is bad input naming the file."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise ExperimentError(path, field, "not a UTF-8 text file") from None
    except OSError as exc:
        raise ExperimentError(path, field, exc.strerror or str(exc)) from None
    if "\0" in text:
        line = text[:text.index("\0")].count("\n") + 1
        raise ExperimentError(path, field, f"holds a NUL byte (line {line}): not a text file")
    return text


class LaunchFile(LaunchSpec):
    """``best-launch.json`` and ``--launch``: a launch configuration with its schema version."""

    schema_version: int = version_field(1)


def load_launch(text: str) -> LaunchSpec:
    """A launch configuration from a JSON string or a JSON file (``--launch``)."""
    path = Path(text)
    source = "--launch"
    if not text.lstrip().startswith("{"):
        data = read_json_file(path, "launch file")
        source = str(path)
    else:
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            raise ExperimentError(source, "", f"not valid JSON: {exc.msg}") from None
        except (ValueError, RecursionError) as exc:  # a number of thousands of digits, nesting thousands deep
            raise ExperimentError(source, "", f"not valid JSON: {shortened(str(exc), 120)}") from None
    try:
        launch = LaunchFile.model_validate(data, strict=True)
    except ValidationError as exc:
        raise ExperimentError(source, *validation_message(exc, LaunchFile)) from None
    return LaunchSpec(**launch.model_dump(exclude={"schema_version"}))
