"""Tunable parameters: the search space and its restrictions.

Tunables reach the kernel as preprocessor defines; launch expressions may use them; a
restriction is an expression over them (``BLOCK_X == BLOCK_Y * TILE_Y``) evaluated by the same
safe evaluator as everything else. A space is declared in the experiment or in a comment block
of the kernel source::

    /* cudaopt-tune {"tunables": {"BM": [32, 64]}, "restrictions": ["BM >= 32"],
                     "launch": {"grid": ["cdiv(n, BM)"], "block": [256]}} */
"""

from __future__ import annotations

import itertools
import json
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from ..experiment import LaunchModel
from ..harness import expr

_BLOCK = re.compile(r"/\*\s*cudaopt-tune\s*(\{.*?\})\s*\*/", re.DOTALL)


class SpaceError(ValueError):
    """A search space that cannot be used; the message names the field."""


class TuneSpace(BaseModel):
    model_config = ConfigDict(extra="forbid")
    tunables: dict[str, list[int | float | str]] = Field(min_length=1)
    restrictions: list[str] = Field(default_factory=list)
    launch: LaunchModel | None = None

    @field_validator("tunables")
    @classmethod
    def _names(cls, value: dict) -> dict:
        for name, values in value.items():
            if not re.fullmatch(r"[A-Za-z_]\w*", name):
                raise ValueError(f"{name!r} is not a valid macro name")
            if not values:
                raise ValueError(f"{name}: needs at least one value")
        return value

    @field_validator("restrictions")
    @classmethod
    def _restrictions(cls, value: list[str]) -> list[str]:
        for text in value:
            expr.parse(text)
        return value

    def size(self) -> int:
        total = 1
        for values in self.tunables.values():
            total *= len(values)
        return total

    def allows(self, config: dict) -> bool:
        try:
            return all(bool(expr.evaluate(r, config)) for r in self.restrictions)
        except expr.ExprError:
            return False  # e.g. a division by zero for this combination: not a valid point

    def configurations(self) -> list[dict]:
        """Every combination that satisfies the restrictions, in declaration order."""
        names = list(self.tunables)
        combos = (dict(zip(names, values, strict=True)) for values in itertools.product(*self.tunables.values()))
        return [c for c in combos if self.allows(c)]


def from_source(source: str) -> TuneSpace | None:
    """The space declared in a ``/* cudaopt-tune {...} */`` comment of a kernel source, if any."""
    match = _BLOCK.search(source)
    if not match:
        return None
    try:
        return TuneSpace.model_validate(json.loads(match.group(1)))
    except json.JSONDecodeError as exc:
        raise SpaceError(f"cudaopt-tune block: not valid JSON: {exc.msg}") from None
    except ValidationError as exc:
        err = exc.errors()[0]
        raise SpaceError(f"cudaopt-tune block: {'.'.join(map(str, err['loc']))}: {err['msg']}") from None
