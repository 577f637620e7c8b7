"""A small, safe evaluator for shape, launch and restriction expressions.

Launch configurations are written as expressions over the case scalars and the kernel's
tunables (``cdiv(n, 16)``) so a kernel also runs on shapes the model never saw. The text may
come from a model, so it is parsed with :mod:`ast` and only arithmetic, comparisons, names and
a fixed set of functions are allowed; nothing is ever passed to ``eval``. A kernel name
(:func:`evaluate_name`) is a plain identifier or a conditional whose branches are quoted names,
``'gemm_small' if m < 256 else 'gemm_large'``; strings go nowhere else.
"""

from __future__ import annotations

import ast
import functools
import math
import operator
import re
from collections.abc import Mapping

Number = int | float


class ExprError(ValueError):
    """An expression that is malformed, unsafe, or refers to an unknown name."""


def _cdiv(a: Number, b: Number) -> int:
    """Integer ceiling division of the operands truncated to integers (as the exported code does):
    a divisor that truncates to 0 (0.5) is a division by zero."""
    if int(b) == 0:
        raise ExprError("cdiv by zero")
    return -(-int(a) // int(b))


def _round_up(a: Number, b: Number) -> int:
    return _cdiv(a, b) * int(b)


FUNCTIONS = {
    "cdiv": _cdiv,
    "round_up": _round_up,
    "min": min,
    "max": max,
    "abs": abs,
    "int": int,
    "ceil": math.ceil,
    "floor": math.floor,
    "log2": math.log2,
    "sqrt": math.sqrt,
}

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.USub: operator.neg, ast.UAdd: operator.pos, ast.Not: operator.not_}
_COMPARE = {
    ast.Eq: operator.eq,
    ast.NotEq: operator.ne,
    ast.Lt: operator.lt,
    ast.LtE: operator.le,
    ast.Gt: operator.gt,
    ast.GtE: operator.ge,
}
_LIMIT = 2**63
_MAX_LENGTH = 500
_IDENTIFIER = IDENTIFIER = re.compile(r"[A-Za-z_]\w*")  # a kernel name


def parse(text: str, names: bool = False) -> ast.Expression:
    """Parse and validate an expression; raise :class:`ExprError` on anything not allowed.
    With ``names``, the result may be a quoted kernel name, chosen by conditionals. Parsed once
    per text (a tune space evaluates its restrictions on many configurations): the tree is shared, never
    change it."""
    if not isinstance(text, str):
        raise ExprError(f"expected an expression string, got {type(text).__name__}")
    return _parse(text, names)


def names_in(text: str, names: bool = False) -> set[str]:
    """The names an expression (a kernel name's, with ``names``) uses, function names excluded."""
    if not isinstance(text, str):
        raise ExprError(f"expected an expression string, got {type(text).__name__}")
    return set(_names_in(text, names))


@functools.lru_cache(maxsize=4096)
def _names_in(text: str, names: bool) -> frozenset[str]:
    """Once per text: a launch is checked on every case and configuration (10 x 5000 for a large
    input-cases file), each time over every expression of its table."""
    tree = _parse(text, names)
    called = {id(n.func) for n in ast.walk(tree) if isinstance(n, ast.Call)}
    return frozenset(n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and id(n) not in called)


@functools.lru_cache(maxsize=4096)
def _parse(text: str, names: bool) -> ast.Expression:
    if len(text) > _MAX_LENGTH:
        raise ExprError(f"expression longer than {_MAX_LENGTH} characters")
    try:
        tree = ast.parse(text.strip(), mode="eval")
    except SyntaxError as exc:
        raise ExprError(f"syntax error in {text!r}: {exc.msg}") from None
    leaves = list(_name_leaves(tree.body)) if names else []
    for leaf in leaves:
        if not (isinstance(leaf, ast.Constant) and isinstance(leaf.value, str) and _IDENTIFIER.fullmatch(leaf.value)):
            raise ExprError(f"{ast.unparse(leaf)} in {text!r} is not a quoted kernel name")
    named = {id(leaf) for leaf in leaves}
    for node in ast.walk(tree):
        if id(node) not in named:
            _validate(node, text)
    return tree


def _name_leaves(node: ast.AST):
    """What stands in result position: the whole expression or, through conditionals, each of
    its branches. Each must be a quoted name, and only there may a string stand."""
    if isinstance(node, ast.IfExp):
        yield from _name_leaves(node.body)
        yield from _name_leaves(node.orelse)
    else:
        yield node


def _validate(node: ast.AST, text: str) -> None:
    allowed = (
        ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.IfExp,
        ast.Constant, ast.Name, ast.Call, ast.Load, ast.And, ast.Or,
        *_BINOPS, *_UNARY, *_COMPARE,
    )
    if not isinstance(node, allowed):
        raise ExprError(f"{type(node).__name__} is not allowed in {text!r}")
    if isinstance(node, ast.Constant) and (
        isinstance(node.value, bool) or not isinstance(node.value, (int, float))
    ):
        raise ExprError(f"only numeric constants are allowed in {text!r}")
    if isinstance(node, ast.Call):
        if not isinstance(node.func, ast.Name) or node.func.id not in FUNCTIONS:
            raise ExprError(
                f"unknown function in {text!r}; allowed: {', '.join(sorted(FUNCTIONS))}"
            )
        if node.keywords:
            raise ExprError(f"keyword arguments are not allowed in {text!r}")


def evaluate(text: str | Number, names: Mapping[str, Number]) -> Number:
    """Evaluate ``text`` with ``names`` bound; plain numbers pass through unchanged."""
    if isinstance(text, bool):
        raise ExprError("booleans are not numbers here")
    if isinstance(text, (int, float)):
        return text
    return _eval(parse(text).body, names, text)


def evaluate_int(text: str | Number, names: Mapping[str, Number]) -> int:
    """Evaluate to an integer; a float result must be integral (``8.0`` is fine, ``8.5`` is not)."""
    value = evaluate(text, names)
    if isinstance(value, float):
        if not value.is_integer():
            raise ExprError(f"{text!r} evaluates to {value}, not an integer")
        value = int(value)
    return int(value)


def check_name(text: str) -> None:
    """Raise :class:`ExprError` unless ``text`` is a kernel name or a choice among quoted ones."""
    if not (isinstance(text, str) and _IDENTIFIER.fullmatch(text.strip())):
        parse(text, names=True)


def evaluate_name(text: str, names: Mapping[str, Number]) -> str:
    """A kernel name: ``text`` itself when it is an identifier, else the quoted name its
    conditionals choose (``'small' if m < 256 else 'large'``) with ``names`` bound."""
    if not isinstance(text, str):
        raise ExprError(f"expected a kernel name, got {type(text).__name__}")
    if _IDENTIFIER.fullmatch(text.strip()):
        return text.strip()
    value = _eval(parse(text, names=True).body, names, text)
    if not isinstance(value, str) or not _IDENTIFIER.fullmatch(value):
        raise ExprError(f"{text!r} gives {value!r}, not a kernel name")
    return value


def _eval(node: ast.AST, names: Mapping[str, Number], text: str):
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, ast.Name):
        if node.id not in names:
            raise ExprError(f"unknown name {node.id!r} in {text!r}")
        value = names[node.id]
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            raise ExprError(f"{node.id} is {value!r}, not a number, in {text!r}")
        return value
    if isinstance(node, ast.UnaryOp):
        return _UNARY[type(node.op)](_eval(node.operand, names, text))
    if isinstance(node, ast.BinOp):
        left = _eval(node.left, names, text)
        right = _eval(node.right, names, text)
        if isinstance(node.op, ast.Pow) and (abs(right) > 64 or abs(left) > 2**32):
            raise ExprError(f"power too large in {text!r}")
        try:
            result = _BINOPS[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ExprError(f"division by zero in {text!r}") from None
        except (TypeError, OverflowError) as exc:
            raise ExprError(f"{exc} in {text!r}") from None
        if isinstance(result, complex):  # a fractional power of a negative number
            raise ExprError(f"not a real number in {text!r}")
        if abs(result) >= _LIMIT or result != result:
            raise ExprError(f"value out of range in {text!r}")
        return result
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, names, text) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.Compare):
        left = _eval(node.left, names, text)
        for op, comparator in zip(node.ops, node.comparators, strict=True):
            right = _eval(comparator, names, text)
            if not _COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.IfExp):
        branch = node.body if _eval(node.test, names, text) else node.orelse
        return _eval(branch, names, text)
    if isinstance(node, ast.Call):
        args = [_eval(a, names, text) for a in node.args]
        try:
            return FUNCTIONS[node.func.id](*args)
        except (TypeError, ValueError, OverflowError) as exc:
            raise ExprError(f"{node.func.id}() failed in {text!r}: {exc}") from None
    raise ExprError(f"{type(node).__name__} is not allowed in {text!r}")  # pragma: no cover
