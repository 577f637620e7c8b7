"""Field types of the files a user writes whose checks are about the machine, not the problem:
a file name the operating system can take, a case name that fits one line of an error or a table,
the name of a variable in a kernel; and the ``schema_version`` every file cudaopt writes carries."""

from __future__ import annotations

import os
import re
from typing import Annotated

from pydantic import AfterValidator, Field


def unusable_name(value: str) -> str | None:
    """Why the operating system would refuse ``value`` as a path (None when it would not): a NUL
    byte, a part longer than a file system allows. The OS raises on it deep inside, where a user
    needs the field or argument named."""
    if "\0" in value:
        return "a path with a NUL byte names no file"
    if any(len(os.fsencode(part)) > 255 for part in value.split("/")) or len(os.fsencode(value)) > 4096:
        return f"{value[:40]!r}...: longer than a file name or path may be"
    return None


def _file_name(value: str) -> str:
    """A file named in an input file, one the OS can take."""
    why = unusable_name(value)
    if why is not None:
        raise ValueError(why)
    return value


def _one_line(value: str) -> str:
    if not value.isprintable():
        raise ValueError(f"{value!r}: a case name is one line of printable characters (errors and tables "
                         "name the case)")
    return value


FileName = Annotated[str, AfterValidator(_file_name)]
CaseName = Annotated[str, Field(min_length=1, max_length=200), AfterValidator(_one_line)]


def _identifier(value: str) -> str:
    if not re.fullmatch(r"[A-Za-z_]\w{0,127}", value):
        raise ValueError(f"{value[:40]!r}: not a C identifier (the name of a __device__ array)")
    return value


CIdentifier = Annotated[str, AfterValidator(_identifier)]


def version_field(current: int):
    """A ``schema_version`` field: files written before versioning read as the current shape;
    a newer one is refused as made by a newer cudaopt (errors.validation_message says so)."""
    return Field(current, ge=1, le=current, description=f"the file's schema version (this cudaopt writes {current})")
