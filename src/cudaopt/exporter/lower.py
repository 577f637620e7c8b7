"""Launch and shape expressions lowered to plain Python and to C, for the exported host code.

An export runs without cudaopt, so no expression evaluator may travel with it: each expression
(wire/expr.py's language: arithmetic, comparisons, ``and``/``or``, ``a if c else b``, its
functions, quoted kernel names chosen by conditionals) is parsed with the same checks and
written out as code that computes what :func:`cudaopt.wire.expr.evaluate` computes.
Python keeps Python's semantics by construction (the helpers named in :data:`PY_HELPERS`
are copies of the evaluator's); C gets typed code (``long long`` or ``double`` per node, the
C helpers in :data:`C_HELPERS`), where floor division, modulo and conversions follow Python's
rules and every failure the evaluator raises (a division by zero, a non-integral dimension, a
logarithm of a non-positive number) sets an error flag instead.
"""

from __future__ import annotations

import ast
import copy
import keyword
import re
from collections.abc import Mapping

from ..wire import expr

# helper functions the generated Python defines (copied into each torch export)
PY_HELPERS = '''
def _cdiv(a, b):
    if b == 0:
        raise ValueError("cdiv by zero")
    return -(-int(a) // int(b))


def _round_up(a, b):
    return _cdiv(a, b) * int(b)


def _as_int(value, what):
    if isinstance(value, float):
        if not value.is_integer():
            raise ValueError(f"{what} evaluates to {value}, not an integer")
        return int(value)
    return int(value) if isinstance(value, (int, bool)) else value  # a SymInt under torch.compile stays one


def _tile(value, what):
    value = _as_int(value, what)
    if value < 1:
        raise ValueError(f"{what} is {value}: a tile must be at least 1")
    return value
'''

_PY_CALLS = {"cdiv": "_cdiv", "round_up": "_round_up", "min": "min", "max": "max", "abs": "abs", "int": "int",
             "ceil": "_math.ceil", "floor": "_math.floor", "log2": "_math.log2", "sqrt": "_math.sqrt"}


class LowerError(ValueError):
    """An expression that cannot be exported (a name nothing provides)."""


def py_name(name: str) -> str:
    """A scalar's name as a Python variable: itself, unless it is a keyword or one of the helpers."""
    if name.startswith("_"):
        return f"arg{name}"
    if keyword.iskeyword(name) or name in _PY_CALLS or name in ("out", "min", "max", "abs", "int"):
        return f"{name}_"
    return name


def to_python(text: str | int | float, names: set[str], *, entry: bool = False) -> str:
    """Python source for one expression (a kernel name with ``entry``); its names must be in ``names``."""
    if isinstance(text, (int, float)) and not isinstance(text, bool):
        return repr(text)
    # a copy: expr.parse returns the tree it keeps for every later evaluation of the same text
    tree = copy.deepcopy(expr.parse(text, names=entry)) if not (entry and text.strip().isidentifier()) else None
    if tree is None:
        return repr(text.strip())

    class Rename(ast.NodeTransformer):
        def visit_Name(self, node: ast.Name) -> ast.AST:
            if node.id not in names:
                raise LowerError(f"{text!r} uses {node.id!r}, which is neither a scalar of the signature nor a "
                                 f"fact of the GPU ({', '.join(sorted(names))})")
            return ast.Name(id=py_name(node.id), ctx=ast.Load())

        def visit_Call(self, node: ast.Call) -> ast.AST:
            node.args = [self.visit(a) for a in node.args]
            node.func = ast.parse(_PY_CALLS[node.func.id], mode="eval").body
            return node

    return ast.unparse(Rename().visit(tree.body))


# --- C -------------------------------------------------------------------------------------

C_HELPERS = r'''
static inline long long co_floordiv(long long a, long long b, int* bad) {
    if (b == 0) { *bad = 1; return 0; }
    long long q = a / b;
    return (a % b != 0 && ((a < 0) != (b < 0))) ? q - 1 : q;
}
static inline long long co_mod(long long a, long long b, int* bad) {
    if (b == 0) { *bad = 1; return 0; }
    long long r = a % b;
    return (r != 0 && ((r < 0) != (b < 0))) ? r + b : r;
}
static inline double co_div(double a, double b, int* bad) {
    if (b == 0.0) { *bad = 1; return 0.0; }
    return a / b;
}
static inline double co_ffloordiv(double a, double b, int* bad) {
    if (b == 0.0) { *bad = 1; return 0.0; }
    return floor(a / b);
}
static inline double co_fmod(double a, double b, int* bad) {
    if (b == 0.0) { *bad = 1; return 0.0; }
    double r = fmod(a, b);
    return (r != 0.0 && ((r < 0.0) != (b < 0.0))) ? r + b : r;
}
static inline long long co_ipow(long long a, long long b, int* bad) {
    if (b < 0) { *bad = 1; return 0; }
    long long r = 1;
    while (b-- > 0) r *= a;
    return r;
}
static inline long long co_cdiv(long long a, long long b, int* bad) {
    return -co_floordiv(-a, b, bad);
}
static inline long long co_tile(long long a, int* bad) {
    if (a < 1) { *bad = 1; return 1; }
    return a;
}
static inline long long co_round_up(long long a, long long b, int* bad) {
    return co_cdiv(a, b, bad) * b;
}
static inline long long co_mini(long long a, long long b) { return a < b ? a : b; }
static inline long long co_maxi(long long a, long long b) { return a > b ? a : b; }
static inline double co_minf(double a, double b) { return b < a ? b : a; }
static inline double co_maxf(double a, double b) { return b > a ? b : a; }
static inline double co_log2(double a, int* bad) {
    if (a <= 0.0) { *bad = 1; return 0.0; }
    return log2(a);
}
static inline double co_sqrt(double a, int* bad) {
    if (a < 0.0) { *bad = 1; return 0.0; }
    return sqrt(a);
}
static inline long long co_to_int(double a, int* bad) {
    if (a != floor(a) || a > 9.2e18 || a < -9.2e18) { *bad = 1; return 0; }
    return (long long)a;
}
'''

def c_helpers(code: str) -> str:
    """The helpers of :data:`C_HELPERS` that ``code`` calls, with those they call (unused ones would
    draw compiler warnings)."""
    blocks = {re.search(r"(co_\w+)\(", b).group(1): "static inline" + b for b in C_HELPERS.split("static inline")[1:]}
    wanted: set[str] = set()
    todo = set(re.findall(r"\b(co_\w+)\(", code))
    while todo:
        name = todo.pop()
        if name in blocks and name not in wanted:
            wanted.add(name)
            todo |= set(re.findall(r"\b(co_\w+)\(", blocks[name].split("{", 1)[1]))
    return "".join(block for name, block in blocks.items() if name in wanted).strip()


_C_COMPARE = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">="}
_C_ARITH = {ast.Add: "+", ast.Sub: "-", ast.Mult: "*"}


def to_c(text: str | int | float, types: Mapping[str, str], *, bad: str = "&bad",
         rename: Mapping[str, str] | None = None) -> tuple[str, str]:
    """C source for one expression and its type (``"i"``: long long, ``"f"``: double). ``types``
    gives each name's type, ``rename`` the C variable of a name that is not its own (a let's);
    errors set ``*bad``."""
    if isinstance(text, bool):
        raise LowerError("booleans are not numbers here")
    if isinstance(text, int):
        return f"{text}LL", "i"
    if isinstance(text, float):
        return repr(text), "f"
    return _C(text, types, bad, rename).node(expr.parse(text).body)


def to_c_int(text: str | int | float, types: Mapping[str, str], *, bad: str = "&bad",
             rename: Mapping[str, str] | None = None) -> str:
    """C for an expression that must be an integer (a dimension): a double is checked integral."""
    code, kind = to_c(text, types, bad=bad, rename=rename)
    return code if kind == "i" else f"co_to_int({code}, {bad})"


def entry_to_c(text: str, types: Mapping[str, str], kernels: Mapping[str, str], *, bad: str = "&bad",
               rename: Mapping[str, str] | None = None) -> str:
    """C choosing a kernel: the function named by ``text``, or its conditionals over quoted names;
    ``kernels`` maps each name the source declares to the C expression of its function."""
    if text.strip().isidentifier():
        return _kernel(text.strip(), kernels, text)
    helper = _C(text, types, bad, rename)

    def choose(node: ast.AST) -> str:
        if isinstance(node, ast.IfExp):
            return f"({helper.cond(node.test)} ? {choose(node.body)} : {choose(node.orelse)})"
        return _kernel(node.value, kernels, text)

    return choose(expr.parse(text, names=True).body)


def _kernel(name: str, kernels: Mapping[str, str], text: str) -> str:
    if name not in kernels:
        raise LowerError(f"{text!r} names {name!r}, which the source does not declare")
    return kernels[name]


class _C:
    def __init__(self, text: str, types: Mapping[str, str], bad: str, rename: Mapping[str, str] | None = None):
        self.text, self.types, self.bad, self.rename = text, types, bad, rename or {}

    def cond(self, node: ast.AST) -> str:
        code, kind = self.node(node)
        return f"({code} != 0.0)" if kind == "f" else f"({code} != 0)"

    def node(self, node: ast.AST) -> tuple[str, str]:  # noqa: C901 - one branch per node kind
        if isinstance(node, ast.Constant):
            return (f"{node.value}LL", "i") if isinstance(node.value, int) else (repr(float(node.value)), "f")
        if isinstance(node, ast.Name):
            if node.id not in self.types:
                raise LowerError(f"{self.text!r} uses {node.id!r}, which is neither a scalar of the signature nor "
                                 f"a fact of the GPU ({', '.join(sorted(self.types))})")
            kind, name = self.types[node.id], self.rename.get(node.id, node.id)
            return (f"((long long){name})", "i") if kind == "i" else (f"((double){name})", "f")
        if isinstance(node, ast.UnaryOp):
            code, kind = self.node(node.operand)
            if isinstance(node.op, ast.Not):
                return f"(!{self.cond(node.operand)})", "i"
            return (f"(-{code})" if isinstance(node.op, ast.USub) else code), kind
        if isinstance(node, ast.BinOp):
            return self.binop(node)
        if isinstance(node, ast.Compare):
            parts, left = [], self.node(node.left)[0]
            for op, comparator in zip(node.ops, node.comparators, strict=True):
                right = self.node(comparator)[0]
                parts.append(f"({left} {_C_COMPARE[type(op)]} {right})")
                left = right
            return f"({' && '.join(parts)})", "i"
        if isinstance(node, ast.BoolOp):
            joiner = " && " if isinstance(node.op, ast.And) else " || "
            return f"({joiner.join(self.cond(v) for v in node.values)})", "i"
        if isinstance(node, ast.IfExp):
            (body, bk), (orelse, ok) = self.node(node.body), self.node(node.orelse)
            if "f" in (bk, ok):
                return f"({self.cond(node.test)} ? (double){body} : (double){orelse})", "f"
            return f"({self.cond(node.test)} ? {body} : {orelse})", "i"
        if isinstance(node, ast.Call):
            return self.call(node)
        raise LowerError(f"{type(node).__name__} cannot be exported from {self.text!r}")  # pragma: no cover

    def binop(self, node: ast.BinOp) -> tuple[str, str]:
        (a, ak), (b, bk) = self.node(node.left), self.node(node.right)
        ints = ak == bk == "i"
        op = type(node.op)
        if op in _C_ARITH:
            return (f"({a} {_C_ARITH[op]} {b})", "i") if ints else (f"((double){a} {_C_ARITH[op]} (double){b})", "f")
        if op is ast.Div:
            return f"co_div((double){a}, (double){b}, {self.bad})", "f"
        if op is ast.FloorDiv:
            return (f"co_floordiv({a}, {b}, {self.bad})", "i") if ints else \
                (f"co_ffloordiv((double){a}, (double){b}, {self.bad})", "f")
        if op is ast.Mod:
            return (f"co_mod({a}, {b}, {self.bad})", "i") if ints else \
                (f"co_fmod((double){a}, (double){b}, {self.bad})", "f")
        return (f"co_ipow({a}, {b}, {self.bad})", "i") if ints else (f"pow((double){a}, (double){b})", "f")

    def call(self, node: ast.Call) -> tuple[str, str]:
        name = node.func.id
        args = [self.node(a) for a in node.args]
        as_int = [c if k == "i" else f"((long long)({c}))" for c, k in args]
        as_float = [f"(double){c}" for c, _ in args]
        if name in ("cdiv", "round_up") and len(args) == 2:
            return f"co_{name}({as_int[0]}, {as_int[1]}, {self.bad})", "i"
        if name in ("min", "max") and args:
            ints = all(k == "i" for _, k in args)
            fn, items = (f"co_{name}i", [c for c, _ in args]) if ints else (f"co_{name}f", as_float)
            code = items[0]
            for item in items[1:]:
                code = f"{fn}({code}, {item})"
            return code, "i" if ints else "f"
        if len(args) != 1:
            raise LowerError(f"{name}() takes one argument in {self.text!r}")
        (code, kind), = args
        if name == "abs":
            return (f"llabs({code})", "i") if kind == "i" else (f"fabs({code})", "f")
        if name == "int":
            return as_int[0], "i"
        if name in ("ceil", "floor"):
            return (code, "i") if kind == "i" else (f"((long long){name}({code}))", "i")
        return f"co_{name}({as_float[0]}, {self.bad})", "f"
