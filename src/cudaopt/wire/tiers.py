"""A launch's tier table: its named values (``let``) evaluated in order, then the first tier
whose ``when`` holds.

A kernel with several paths (a large tile for big problems, smaller ones when the large tiles
would leave SMs idle) is launched by a decision that, written as one expression per field,
repeats itself in every field. The table says it once: each row a condition, the kernel, its
block and its tile; the grid is the problem's size in tiles unless the row gives it. The
expressions are the evaluator's (expr.py), no more: a ``let`` is a name for a value, never code.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass

from . import expr
from .protocol import Expr, LaunchSpec


class LaunchError(ValueError):
    """A launch that cannot be used; ``field`` names the part at fault (``grid[1]``,
    ``tiers[2].block[0]``, ``let.big``)."""

    def __init__(self, message: str, field: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Tier:
    """The parts of the launch a case takes: a tier's, or those of a launch without tiers."""

    index: int | None  # None: a launch without tiers
    name: str | None
    entry: str | None
    grid: list[Expr] | None  # None: cdiv(size[i], tile[i])
    tile: list[Expr] | None
    block: list[Expr]
    shared_bytes: Expr
    when: Expr | None = None  # None: the default row (or a launch without tiers)

    def error(self, message: str, field: str) -> LaunchError:
        """An error in one of the tier's fields, naming the tier (``launch tier 'medium' (tiers[2])``)."""
        if self.index is None:
            return LaunchError(message, field)
        return LaunchError(f"tier {self.name!r}: {message}" if self.name else message, f"tiers[{self.index}].{field}")

    def grid_text(self, size: list[Expr]) -> list[str]:
        """The derived grid as it reads (``cdiv(n, BN)``), for messages."""
        return [f"cdiv({s}, {t})" for s, t in zip(size, self.tile or [], strict=True)]


def choose_tier(spec: LaunchSpec, names: Mapping) -> tuple[Tier, dict]:
    """The tier a case takes and the names its expressions see (``names`` and the lets)."""
    scope = dict(names)
    for name, text in (spec.let or {}).items():
        if name in scope:
            raise LaunchError(f"{name!r} shadows a name the launch already has (a case scalar, a tunable or a "
                              "fact of the GPU)", f"let.{name}")
        try:
            value = expr.evaluate(text, scope)
        except expr.ExprError as exc:
            raise LaunchError(str(exc), f"let.{name}") from None
        scope[name] = int(value) if isinstance(value, bool) else value  # a condition is 1 or 0
    for tier in rows(spec):
        if tier.when is not None:
            try:
                holds = expr.evaluate(tier.when, scope)
            except expr.ExprError as exc:
                raise tier.error(str(exc), "when") from None
            if not holds:
                continue
        return tier, scope
    raise LaunchError("no tier's `when` holds (give the last tier no `when`: it is then the default)", "tiers")


def rows(spec: LaunchSpec) -> list[Tier]:
    """Every row of the launch in order, the launch's own entry and shared bytes filled in where a
    tier leaves them out (a launch without tiers is one row): the one place these defaults are
    written, for the harness and for the exported launchers alike."""
    if spec.tiers is None:
        return [Tier(None, None, spec.entry, spec.grid, None, spec.block or [], spec.shared_bytes)]
    return [Tier(i, t.name, t.entry or spec.entry, t.grid, t.tile, t.block,
                 t.shared_bytes if t.shared_bytes is not None else spec.shared_bytes, t.when)
            for i, t in enumerate(spec.tiers)]


def expressions(spec: LaunchSpec) -> Iterator[tuple[str, Expr, bool]]:
    """Every expression of the launch, in order, with its field and whether it is a kernel name."""
    for name, text in (spec.let or {}).items():
        yield f"let.{name}", text, False
    for field in ("grid", "block", "size"):
        for d, text in enumerate(getattr(spec, field) or []):
            yield f"{field}[{d}]", text, False
    yield "shared_bytes", spec.shared_bytes, False
    if spec.entry is not None:
        yield "entry", spec.entry, True
    for i, tier in enumerate(spec.tiers or []):
        if tier.when is not None:
            yield f"tiers[{i}].when", tier.when, False
        for field in ("grid", "tile", "block"):
            for d, text in enumerate(getattr(tier, field) or []):
                yield f"tiers[{i}].{field}[{d}]", text, False
        if tier.shared_bytes is not None:
            yield f"tiers[{i}].shared_bytes", tier.shared_bytes, False
        if tier.entry is not None:
            yield f"tiers[{i}].entry", tier.entry, True


def unknown_name(spec: LaunchSpec, known: set[str]) -> tuple[str, str] | None:
    """The first expression, in any tier (taken or not), that uses a name nothing defines: its
    field and the problem. A let sees only the lets before it."""
    lets = list(spec.let or {})
    for field, text, is_name in expressions(spec):
        if not isinstance(text, str) or (is_name and expr.IDENTIFIER.fullmatch(text.strip())):
            continue
        visible = known | (set(lets[:lets.index(field[4:])]) if field.startswith("let.") else set(lets))
        missing = sorted(expr.names_in(text, names=is_name) - visible)
        if missing:
            return field, f"unknown name {missing[0]!r} in {text!r}"
    return None
