"""A KernelBench problem as a cudaopt experiment: signature and cases.

The mapping (docs/kernelbench.md has it for users):

- **arguments**: one ``const T*`` per tensor ``get_inputs()`` returns (named like ``forward``'s
  parameters), a ``float`` or ``int`` scalar per number it returns (its value in every case), one per parameter of the model and per buffer whose value depends on the seed
  (the kernel must be given what it cannot know; fixed buffers such as masks stay part of the
  function), one ``T*`` per output (``out``, or ``out0``, ``out1``, ...), and one ``int`` per
  distinct dimension: named after the module constant it equals (found by changing each constant
  and seeing which dimensions follow it), else ``TENSOR_dimK``.
- **cases**: the problem's own sizes as the performance case; where ``get_inputs()`` reads size
  constants, two smaller odd-sized correctness cases and a holdout at about a quarter of each
  size, made by setting those constants (sizes that break the problem are replaced by halvings,
  which keep its divisibility); without them, a holdout at the problem's sizes with another seed.
- **inputs** are drawn by the harness from a distribution fitted to what ``get_inputs()`` and the
  seeded model make at that case's sizes (normal, uniform, or integers over the observed range).
- **work**: ``bytes`` counts every argument once; ``flops`` only matrix products (torch's flop
  counter), since other operations may be done with fewer flops than their direct form.

Long because the mapping is one piece: the arguments, the sizes each dimension follows, the cases
and how each input is drawn are read off the same probes of the problem.
"""

from __future__ import annotations

import inspect
import keyword
import re
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..errors import ExperimentError
from ..wire import expr
from ..wire.protocol import CaseSpec, InitSpec, InputSpec, LaunchSpec, OutputSpec
from ..wire.signature import Arg, Signature
from .problem import CPU_BYTES, DTYPES, ITEMSIZE, SAMPLE_LIMIT, Layout, Problem, Size, Tensor

_RESERVED = {
    "auto", "break", "case", "char", "class", "const", "continue", "default", "delete", "do", "double", "else",
    "enum", "extern", "float", "for", "goto", "if", "inline", "int", "long", "namespace", "new", "operator",
    "private", "protected", "public", "register", "return", "short", "signed", "sizeof", "static", "struct",
    "switch", "template", "this", "throw", "try", "typedef", "typename", "union", "unsigned", "using", "virtual",
    "void", "volatile", "while", "bool", "true", "false", "half", "size_t", "threadIdx", "blockIdx", "blockDim",
    "gridDim", "warpSize", *expr.FUNCTIONS,
}
EARLY_CHECK_BYTES = 64 << 20
_SMALL = (37, 31, 29, 23, 19, 17, 13, 11, 7, 5)  # first correctness case: distinct odd primes
_MEDIUM = (97, 89, 83, 79, 73, 71, 67, 61, 59, 53)  # the second
NUMBER_TYPES = {"float": "float32", "int": "int32"}  # a Python number forward takes -> the kernel scalar's type


@dataclass(frozen=True)
class Slot:
    """A kernel argument's place in a :class:`Layout`: an input or output by position, state by path."""

    arg: str
    kind: str  # "input", "number" (a forward argument that is a Python number), "state", "output"
    key: int | str

    def of(self, layout: Layout) -> Tensor:
        if self.kind == "state":
            return next(t for t in layout.state if t.name == self.key)
        return (layout.outputs if self.kind == "output" else layout.inputs)[self.key]

    @property
    def pointer(self) -> bool:
        return self.kind != "number"


@dataclass
class Plan:
    """The size constants of one case."""

    name: str
    role: str
    values: dict[str, int]
    seed: int


@dataclass
class Translation:
    """What the experiment directory is written from."""

    signature: Signature
    inputs: list[str]  # forward's arguments, in order
    state: dict[str, str]  # kernel argument -> the model's parameter or buffer path
    bools: list[str]  # uint8 arguments the forward takes as bool
    sizes: list[Size]  # the size constants among the kernel's scalars
    cases: list[CaseSpec]
    launch: LaunchSpec
    notes: list[str] = field(default_factory=list)


def translate(problem: Problem, *, name: str, seed: int, rtol: float, atol: float,
              on_layout: Callable[[Layout], None] | None = None) -> Translation:
    """The problem's experiment; ExperimentError (one line) for a problem that cannot be a kernel.
    ``on_layout`` is told what crosses the boundary at the problem's own sizes, as soon as it is known."""
    base = problem.layout(problem.defaults)
    if on_layout is not None:
        on_layout(base)
    # a random forward is refused before the probes, when the problem's own sizes are cheap to run
    checked = base.nbytes() <= EARLY_CHECK_BYTES and problem.check_deterministic(problem.defaults, seed)
    follows = _follows(problem, base)
    scalable = {size for (kind, _, _), size in follows.items() if kind == "input"}
    smallest = next((v for v in _candidates(problem.defaults, scalable, "small") if problem.works(v)),
                    dict(problem.defaults))
    notes: list[str] = []
    if not checked and not problem.check_deterministic(smallest, seed):
        notes.append("too large to run on the CPU at any size: not checked that forward is deterministic")
    plans = _plans(problem, scalable, seed, notes)
    layouts = [base if plan.values == problem.defaults else problem.layout(plan.values) for plan in plans]
    follows = _holding(follows, plans, layouts)
    slots, state, dims = _arguments(problem, base, follows, smallest, notes)
    scalars = list(dict.fromkeys(n for s in slots for n in dims[s.arg]))
    args = [Arg(s.arg, DTYPES[s.of(base).dtype], True, s.kind != "output") for s in slots if s.pointer]
    numbers = [Arg(s.arg, NUMBER_TYPES[s.of(base).dtype], False, False) for s in slots if not s.pointer]
    used = {s.arg for s in slots} | set(scalars) | set(problem.namespace)
    entry = _unique(_identifier(name, lower=True), used, prefix="kb_")
    signature = Signature(entry, (*args, *numbers, *(Arg(n, "int32", False, False) for n in scalars)))
    cases = []
    samples: dict[tuple, dict] = {}
    for plan, layout in zip(plans, layouts, strict=True):
        cases.append(_case(problem, plan, layout, slots, dims, smallest, rtol, atol, notes, samples))
    problem.apply(problem.defaults)
    elements = "*".join(dims[next(s.arg for s in slots if s.kind == "output")])
    launch = LaunchSpec(grid=[f"cdiv({elements}, 256)" if elements else 1], block=[256])
    return Translation(signature=signature, inputs=[s.arg for s in slots if s.kind in ("input", "number")],
                       state=state, bools=[s.arg for s in slots if s.kind != "output" and s.of(base).dtype == "bool"],
                       sizes=[s for s in problem.sizes if s.scalar in scalars], cases=cases, launch=launch,
                       notes=list(dict.fromkeys(notes)))


def _arguments(problem: Problem, base: Layout, follows: dict, smallest: dict[str, int],
               notes: list[str]) -> tuple[list[Slot], dict[str, str], dict[str, list[str]]]:
    """The kernel's pointer arguments (forward's inputs, the model's state it must be given, the
    outputs), which state path each is, and each one's dimensions as scalar names."""
    used: set[str] = set()
    slots = [Slot(n, "number" if base.inputs[i].is_number else "input", i)
             for i, n in enumerate(_input_names(problem, len(base.inputs), used))]
    state = {}
    for path in _random_state(problem, base, smallest, notes):
        arg = _unique(_identifier(path.replace(".", "_")), used, prefix="p_")
        state[arg] = path
        slots.append(Slot(arg, "state", path))
    outputs = [_unique("out" if len(base.outputs) == 1 else f"out{i}", used, prefix="result_")
               for i in range(len(base.outputs))]
    slots += [Slot(n, "output", i) for i, n in enumerate(outputs)]
    for slot in slots:
        if slot.pointer and slot.of(base).dtype not in DTYPES:
            raise ExperimentError(problem.path, "forward" if slot.kind == "output" else "get_inputs",
                                  f"{slot.arg} is {slot.of(base).dtype}: no kernel element type holds it")
    constants = {s.scalar for s in problem.sizes}
    dims = {}
    for slot in slots:
        names = []
        for axis in range(len(slot.of(base).shape)):
            size = follows.get((slot.kind, slot.key, axis))
            if size is not None and (size in used or size in _RESERVED):
                raise ExperimentError(problem.path, size, "a size constant that cannot be a kernel scalar's name "
                                                          "(it names a tensor, or is reserved in C)")
            names.append(size or _unique(f"{slot.arg}_dim{axis}", used | constants, prefix="n_"))
        dims[slot.arg] = names
    return slots, state, dims


# --- names ---------------------------------------------------------------------------------


def _identifier(text: str, lower: bool = False) -> str:
    name = re.sub(r"\W", "_", text, flags=re.ASCII).strip("_") or "kernel"  # C: ASCII letters only
    name = name.lower() if lower else name
    return f"kb_{name}" if name[0].isdigit() else name


def _unique(name: str, used: set[str], prefix: str) -> str:
    candidate = name
    while candidate in used or candidate in _RESERVED or keyword.iskeyword(candidate):
        candidate = prefix + candidate
    used.add(candidate)
    return candidate


def _input_names(problem: Problem, count: int, used: set[str]) -> list[str]:
    """forward's parameter names for the tensors get_inputs() returns (x0, x1, ... beyond them)."""
    try:
        params = list(inspect.signature(problem.namespace["Model"].forward).parameters.values())[1:]
    except (TypeError, ValueError):
        params = []
    named = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    return [_unique(_identifier(named[i]) if i < len(named) else f"x{i}", used, prefix="in_") for i in range(count)]


def _random_state(problem: Problem, base: Layout, values: dict[str, int], notes: list[str]) -> list[str]:
    """The model's parameters, and its buffers whose values change with the seed (built twice on the
    CPU; where that is too large, every floating buffer, so the kernel is given whatever it may need)."""
    params = {n for n, _ in problem.model(problem.defaults, "meta", 0).named_parameters()}
    buffers = [t for t in base.state if t.name not in params]
    random = set()
    if buffers and 2 * problem.layout(values).nbytes() > CPU_BYTES:
        random = {t.name for t in buffers if t.dtype.startswith(("float", "bfloat"))}
        notes.append("too large to build on the CPU: every floating buffer of the model is a kernel input")
    elif buffers:
        one, two = (dict(problem.model(values, "cpu", s).named_buffers()) for s in (1, 2))
        random = {t.name for t in buffers if t.name in one and t.name in two
                  and not problem.torch.equal(one[t.name], two[t.name])}
    return [t.name for t in base.state if t.name in params | random]


def _follows(problem: Problem, base: Layout) -> dict[tuple[str, int | str, int], str]:
    """(kind, position or path, axis) -> the size constant that dimension is: change each constant and
    see which dimensions take its new value."""
    found: dict[tuple[str, int | str, int], str] = {}
    for size in problem.sizes:
        value = problem.defaults[size.scalar]
        changed = {**problem.defaults, size.scalar: 2 * value if value else 1}
        try:
            other = problem.layout(changed, twice=False)
        except ExperimentError:
            continue  # the problem does not run with this constant changed: nothing is learnt from it
        finally:
            problem.apply(problem.defaults)
        for kind, before, after in (("input", base.inputs, other.inputs), ("output", base.outputs, other.outputs),
                                    ("state", base.state, other.state)):
            for i, (a, b) in enumerate(zip(before, after, strict=False)):
                if len(a.shape) != len(b.shape):
                    continue
                key = a.name if kind == "state" else i
                for axis, (x, y) in enumerate(zip(a.shape, b.shape, strict=True)):
                    if x == value and y == changed[size.scalar]:
                        found.setdefault((kind, key, axis), size.scalar)
    return found


def _holding(follows: dict[tuple[str, int | str, int], str], plans: list[Plan],
             layouts: list[Layout]) -> dict[tuple[str, int | str, int], str]:
    """The dimensions that are their size constant in every case too. Doubling a constant can move a
    dimension with it by coincidence (a transposed convolution's stride undone by a pooling: 2*D
    then D, but D - 1 at odd sizes); such a dimension gets a scalar of its own."""
    def extent(layout: Layout, kind: str, key: int | str, axis: int) -> int:
        tensor = next(t for t in layout.state if t.name == key) if kind == "state" else \
            (layout.inputs if kind == "input" else layout.outputs)[key]
        return tensor.shape[axis]

    return {where: size for where, size in follows.items()
            if all(extent(layout, *where) == plan.values[size] for plan, layout in zip(plans, layouts, strict=True))}


# --- cases -----------------------------------------------------------------------------------


def _candidates(defaults: dict[str, int], scalable: set[str], kind: str) -> list[dict[str, int]]:
    """Sizes to try for one kind of case, best first: odd ones, then halvings (which keep divisibility)."""
    names = [n for n in defaults if n in scalable]
    if not names:
        return []
    if kind == "holdout":  # about a quarter, odd
        first = {n: (max(1, defaults[n] // 4) | 1) if defaults[n] > 4 else defaults[n] for n in names}
    else:
        free = list(_SMALL if kind == "small" else _MEDIUM)
        first = {}
        for n in names:
            value = defaults[n]
            pick = next((p for p in free if p < value), None) if value > 4 else value
            if pick is None:  # smaller than every prime left: the odd number just below it
                pick = value - 1 if value % 2 == 0 else value - 2
            if pick in free:
                free.remove(pick)
            first[n] = pick
    halvings = [{n: max(1, defaults[n] // d) for n in names} for d in ((8, 4, 2) if kind == "small" else (4, 2))]
    if kind == "holdout":  # unlike the correctness cases' sizes when it can be
        halvings = [{n: max(1, defaults[n] // d) for n in names} for d in (2, 4, 8)]
    tries = [{**defaults, **t} for t in [first, *halvings]]
    return [t for t in tries if t != defaults]


def _plans(problem: Problem, scalable: set[str], seed: int, notes: list[str]) -> list[Plan]:
    defaults = problem.defaults
    plans: list[Plan] = []
    for kind in ("small", "medium"):
        values = next((v for v in _candidates(defaults, scalable, kind)
                       if all(p.values != v for p in plans) and problem.works(v)), None)
        if values is not None:
            odd = all(values[n] % 2 or values[n] == defaults[n] for n in scalable)
            plans.append(Plan(_label("odd" if odd else "small", values, scalable), "correctness", values,
                              seed + len(plans) + 1))
    if scalable and not plans:
        notes.append("no smaller sizes run: the checks use the problem's own sizes only")
    if not scalable:
        notes.append("get_inputs() reads no size constant: no smaller correctness cases")
    plans.append(Plan(_label("kernelbench", defaults, scalable), "performance", dict(defaults), seed + 10))
    holdout = next((v for v in _candidates(defaults, scalable, "holdout")
                    if all(p.values != v for p in plans) and problem.works(v)), dict(defaults))
    plans.append(Plan(_label("holdout", holdout, scalable), "holdout", holdout, seed + 20))
    problem.apply(defaults)
    return plans


def _label(kind: str, values: dict[str, int], scalable: set[str]) -> str:
    shown = [str(values[n]) for n in values if n in scalable]
    return f"{kind}-{'x'.join(shown)}" if shown else kind


def _case(problem: Problem, plan: Plan, layout: Layout, slots: list[Slot], dims: dict[str, list[str]],
          smallest: dict[str, int], rtol: float, atol: float, notes: list[str], samples: dict) -> CaseSpec:
    scalars: dict[str, int | float] = {s.arg: s.of(layout).value for s in slots if not s.pointer}
    for slot in slots:
        for name, extent in zip(dims[slot.arg], slot.of(layout).shape, strict=True):
            if scalars.setdefault(name, extent) != extent:
                raise ExperimentError(problem.path, name, f"names dimensions of {scalars[name]} and {extent} "
                                                          f"at the sizes of case {plan.name}")
    given = [s for s in slots if s.kind in ("input", "state")]
    inits = _fits(problem, plan, layout, given, smallest, notes, samples)
    inputs = {s.arg: InputSpec(shape=list(dims[s.arg]), init=inits[s.arg]) for s in given}
    outputs = {s.arg: OutputSpec(shape=list(dims[s.arg]), rtol=rtol, atol=atol) for s in slots if s.kind == "output"}
    nbytes = " + ".join(f"{ITEMSIZE.get(s.of(layout).dtype, 4)}*{'*'.join(dims[s.arg]) or 1}"
                        for s in slots if s.pointer)
    return CaseSpec(name=plan.name, role=plan.role, seed=plan.seed, scalars=scalars, inputs=inputs, outputs=outputs,
                    bytes=nbytes, flops=layout.matmul_flops or None)


def _fits(problem: Problem, plan: Plan, layout: Layout, slots: list[Slot], smallest: dict[str, int],
          notes: list[str], samples: dict) -> dict[str, InitSpec]:
    """How the harness draws each input: fitted to what the problem makes at this case's sizes (at
    the smallest sizes when this case is too large to make on the CPU; a model too large even there
    gets PyTorch's default initialisation, ±1/sqrt(fan_in), for its parameters)."""
    def count(at: Layout) -> int:
        return sum(int(np.prod(s.of(at).shape, dtype=np.int64)) for s in slots)

    values = plan.values
    if count(layout) > SAMPLE_LIMIT:
        values = smallest
        if smallest == plan.values or count(problem.layout(smallest, twice=False)) > SAMPLE_LIMIT:
            notes.append(f"{plan.name}: too large to make on the CPU at any size it runs at: floating inputs are "
                         "drawn from a standard normal, integer ones from {0, 1}, parameters like PyTorch's default "
                         "initialisation (not fitted to what the problem makes)")
            return _unfitted(layout, slots)
        notes.append(f"{plan.name}: too large to draw on the CPU; its distributions are fitted at smaller sizes")
    key = tuple(sorted(values.items()))
    if key not in samples:
        samples[key] = _sample(problem, values, plan.seed, slots, notes)
    return samples[key]


def _sample(problem: Problem, values: dict[str, int], seed: int, slots: list[Slot],
            notes: list[str]) -> dict[str, InitSpec]:
    torch = problem.torch
    at = problem.layout(values, twice=False)
    torch.manual_seed(seed)
    made = problem.inputs(values, "cpu")
    state_elements = sum(int(np.prod(t.shape, dtype=np.int64)) for t in at.state)
    if state_elements <= SAMPLE_LIMIT:
        model = problem.model(values, "cpu", seed)
        state = {n: t.detach() for n, t in [*model.named_parameters(), *model.named_buffers()]}
    else:
        state = {}
        notes.append("the model is too large to build on the CPU: its parameters are drawn like PyTorch's default "
                     "initialisation, uniform ±1/sqrt(fan_in)")
    problem.apply(problem.defaults)
    fits = {}
    for slot in slots:
        if slot.kind == "input" or slot.key in state:
            sample = made[slot.key] if slot.kind == "input" else state[slot.key]
            fits[slot.arg], note = fit(sample.to(torch.float64).reshape(-1).numpy(), slot.of(at).dtype)
            if note:
                notes.append(f"{slot.arg}: {note}")
        else:
            fits[slot.arg] = _default_init(str(slot.key), at)
    return fits


def _unfitted(layout: Layout, slots: list[Slot]) -> dict[str, InitSpec]:
    """Distributions for inputs no size lets the CPU make: nothing is fitted, so the plainest."""
    fits = {}
    for slot in slots:
        if slot.kind == "state":
            fits[slot.arg] = _default_init(str(slot.key), layout)
        elif slot.of(layout).dtype.startswith(("float", "bfloat")):
            fits[slot.arg] = InitSpec(dist="normal", mean=0.0, std=1.0)
        else:
            fits[slot.arg] = InitSpec(dist="integers", low=0, high=2)
    return fits


def _default_init(path: str, layout: Layout) -> InitSpec:
    """PyTorch's default initialisation of a parameter, uniform ±1/sqrt(fan_in)."""
    bound = _round(1 / np.sqrt(_fan_in(path, layout)), down=False)
    return InitSpec(dist="uniform", low=-bound, high=bound)


def _fan_in(path: str, layout: Layout) -> int:
    """A parameter's fan-in as PyTorch's default initialisation has it: its own dimensions but the
    first, or for a vector (a bias) those of its module's weight."""
    shapes = {t.name: t.shape for t in layout.state}
    shape = shapes[path]
    if len(shape) < 2:
        shape = shapes.get(path.rpartition(".")[0] + ".weight" if "." in path else "weight", (1, *shape))
    return max(1, int(np.prod(shape[1:], dtype=np.int64)))


def fit(values: np.ndarray, dtype: str) -> tuple[InitSpec, str]:
    """A distribution for values like these, and a note when it cannot be faithful to them."""
    if values.size == 0:
        return InitSpec(dist="uniform", low=0.0, high=1.0), ""
    low, high = float(values.min()), float(values.max())
    if dtype not in ("float32", "float64", "float16", "bfloat16"):
        return InitSpec(dist="integers", low=low, high=high + 1), ""
    notes = []
    distinct = np.unique(values[:1 << 16])
    if values.size >= 1000 and distinct.size <= 16:
        notes.append(f"takes {distinct.size} values in the problem ({', '.join(f'{v:g}' for v in distinct[:4])}"
                     f"{', ...' if distinct.size > 4 else ''}); drawn from a continuous range")
    q_low, q_high = (float(q) for q in np.quantile(values, [0.001, 0.999]))
    if q_high > q_low and (high - q_high > 10 * (q_high - q_low) or q_low - low > 10 * (q_high - q_low)):
        notes.append(f"heavy-tailed (up to {high:.3g}): drawn over its 0.1-99.9 percentiles")
        values = values[(values >= q_low) & (values <= q_high)]
        low, high = q_low, q_high
    mean, std = float(values.mean()), float(values.std())
    if std == 0:
        spread = 0.1 * max(abs(low), 1.0)
        return (InitSpec(dist="uniform", low=low - spread, high=low + spread),
                f"constant ({low:g}) where the problem makes it; drawn from {low:g} ± {spread:g}")
    if np.count_nonzero(values == 0) >= values.size / 10:
        notes.append("has structure (a tenth or more of it zeros) that the drawn inputs will not have")
    flat = float(np.mean(((values - mean) / std) ** 4)) - 3 < -0.6  # a uniform's excess kurtosis is -1.2
    if low >= 0 or flat or notes:
        start = 0.0 if 0 <= low < 0.01 * high else _round(low, down=True)
        return InitSpec(dist="uniform", low=start, high=_round(high, down=False)), "; ".join(notes)
    return InitSpec(dist="normal", mean=0.0 if abs(mean) < 0.05 * std else float(f"{mean:.2g}"),
                    std=float(f"{std:.2g}")), ""


def _round(value: float, down: bool) -> float:
    """Two significant digits, away from the distribution's middle."""
    if value == 0:
        return 0.0
    scale = 10.0 ** (np.floor(np.log10(abs(value))) - 1)
    return float(f"{(np.floor if down else np.ceil)(value / scale) * scale:.2g}")
