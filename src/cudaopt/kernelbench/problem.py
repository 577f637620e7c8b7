"""A KernelBench problem file, loaded and probed: what goes in, what comes out, at which sizes.

The format: a ``Model(nn.Module)`` with ``forward``, module-level size constants, ``get_inputs()``
(the forward's arguments) and ``get_init_inputs()`` (the constructor's). The file is executed in
a namespace of its own. A *size* is a module-level assignment of an int, or a tuple of ints,
written without names (``N = 2048 * 2``, ``input_shape = (4096,)``); an assignment computed from
other names (``bias_shape = (out_channels, 1, 1)``) is *derived*. Setting sizes sets them in the
namespace and runs the derived assignments that depend on them again, in file order: what editing
the file's numbers would do. Shapes and dtypes are learnt on torch's
meta device (nothing is computed, whatever the size), with every device the problem names
(``device="cuda"``, ``.cuda()``) taken as that one; a problem whose forward cannot run there (an
operation without a meta kernel, or a shape that depends on the data) runs on the CPU, twice with
different inputs, and a shape that changes between the two is refused. The CPU only runs what
fits in ``CPU_BYTES``. Every problem that cannot become a kernel experiment is an
:class:`~..errors.ExperimentError` naming the file and what is wrong, on one line.
"""

from __future__ import annotations

import ast
import math
import warnings
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import ExperimentError, shortened

# torch dtype name -> the signature's element type; bool travels as uint8 (viewed back as bool)
DTYPES = {"float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16",
          "int8": "int8", "uint8": "uint8", "int16": "int16", "int32": "int32", "int64": "int64", "bool": "uint8"}
SAMPLE_LIMIT = 1 << 27  # elements: above this a case's tensors are not drawn on the CPU to fit distributions
CPU_BYTES = 2 << 30  # the most a run of the problem on the CPU may hold in its inputs, state and outputs
INT32 = (-(1 << 31), (1 << 31) - 1)  # an int forward argument is a kernel's int


@dataclass(frozen=True)
class Size:
    """A size constant: a module-level int, or one element of a module-level tuple of ints."""

    scalar: str  # its name as a kernel scalar (``input_shape_0`` for ``input_shape[0]``)
    name: str  # the module global
    index: int | None = None


@dataclass(frozen=True)
class Assignment:
    """A module-level assignment: of sizes (``names`` the globals it sets), or derived (``source`` runs again)."""

    names: tuple[str, ...]
    source: str
    derived: bool
    reads: frozenset[str] = frozenset()


@dataclass
class Tensor:
    """One tensor of one evaluation of the problem: a forward argument, a model state entry, or an
    output; or a forward argument that is a Python number (``value``), which the kernel gets as a scalar."""

    name: str  # as the kernel argument will be named (state: its module path until named)
    dtype: str  # torch's name ("float32", "bool", ...); a number: "float" or "int"
    shape: tuple[int, ...]
    value: int | float | None = None  # a number's value

    @property
    def is_number(self) -> bool:
        return self.value is not None


@dataclass
class Layout:
    """Everything that crosses the kernel's boundary at one set of sizes."""

    inputs: list[Tensor]
    state: list[Tensor]  # the model's parameters and buffers, by module path
    outputs: list[Tensor]
    matmul_flops: int = 0  # matrix-product flops (torch's flop counter), 0 when there are none
    flops: int = 0  # every operation torch's flop counter counts (matrix products, convolutions, attention)

    def nbytes(self) -> int:
        return sum(int(np.prod(t.shape, dtype=np.int64)) * ITEMSIZE.get(t.dtype, 4)
                   for t in [*self.inputs, *self.state, *self.outputs] if not t.is_number)


class Unfit(ExperimentError):
    """What the problem is, on any device: not a limit of the meta device that the CPU could get round."""


class Problem:
    """The problem's namespace, with its sizes settable; ``torch`` is imported by the caller."""

    def __init__(self, path: Path, torch):
        self.path, self.torch = path, torch
        try:
            self.source = path.read_text(encoding="utf-8")
            tree = ast.parse(self.source, str(path))
        except (OSError, UnicodeDecodeError) as exc:
            raise ExperimentError(path, "", f"cannot be read: {exc}") from None
        except SyntaxError as exc:
            raise ExperimentError(path, f"line {exc.lineno}", f"not valid Python: {exc.msg}") from None
        self.tree = tree
        self.namespace: dict = {"__name__": "kernelbench_problem", "__file__": str(path)}
        try:
            exec(compile(self.source, str(path), "exec"), self.namespace)  # the user's own problem file
        except Exception as exc:
            raise self.error("", "raised", exc) from None
        for name in ("Model", "get_inputs", "get_init_inputs"):
            if not callable(self.namespace.get(name)):
                raise ExperimentError(path, name, "missing: a KernelBench problem defines Model, get_inputs() and "
                                                  "get_init_inputs()")
        self.sizes = self._sizes()
        self.defaults = self.values()

    def error(self, field: str, what: str, exc: BaseException) -> ExperimentError:
        return ExperimentError(self.path, field, f"{what} {type(exc).__name__}: {shortened(str(exc))}")

    # --- sizes -----------------------------------------------------------------------------

    def _sizes(self) -> list[Size]:
        """The sizes: module-level ints (not bools) and tuples of ints assigned without names."""
        self.assignments: list[Assignment] = []
        found = []
        for node in self.tree.body:
            if not isinstance(node, (ast.Assign, ast.AnnAssign)) or node.value is None:
                continue
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            flat = [e for t in targets for e in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t])]
            if not all(isinstance(t, ast.Name) for t in flat):
                continue
            names = tuple(t.id for t in flat)
            reads = frozenset(n.id for n in ast.walk(node.value) if isinstance(n, ast.Name))
            source = ast.get_source_segment(self.source, node) or ""
            self.assignments.append(Assignment(names, source, bool(reads), reads))
            if reads:
                continue
            for name in names:
                value = self.namespace.get(name)
                if _is_int(value):
                    found.append(Size(name, name))
                elif isinstance(value, (tuple, list)) and value and all(_is_int(v) for v in value):
                    found += [Size(f"{name}_{i}", name, i) for i in range(len(value))]
        unique = {s.scalar: s for s in found}  # a name assigned twice counts once
        return list(unique.values())

    def derived(self, names: set[str]) -> list[Assignment]:
        """The derived assignments that depend on these globals, directly or through each other, in order."""
        tainted, out = set(names), []
        for assignment in self.assignments:
            if assignment.derived and assignment.reads & tainted:
                out.append(assignment)
                tainted |= set(assignment.names)
        return out

    def values(self) -> dict[str, int]:
        return {s.scalar: self._get(s) for s in self.sizes}

    def _get(self, size: Size) -> int:
        value = self.namespace[size.name]
        return int(value if size.index is None else value[size.index])

    def apply(self, values: dict[str, int]) -> None:
        """Set the sizes named in ``values``, then the derived assignments that follow from them."""
        changed = set()
        for size in self.sizes:
            if size.scalar not in values:
                continue
            changed.add(size.name)
            if size.index is None:
                self.namespace[size.name] = int(values[size.scalar])
            else:
                items = list(self.namespace[size.name])
                items[size.index] = int(values[size.scalar])
                self.namespace[size.name] = type(self.namespace[size.name])(items)
        for assignment in self.derived(changed):
            try:
                exec(assignment.source, self.namespace)  # the problem's own statement, run again
            except Exception as exc:
                raise self.error(assignment.names[0], "raised", exc) from None

    # --- running it ------------------------------------------------------------------------

    @contextmanager
    def on(self, device: str):
        """Everything the problem makes, made on ``device`` whatever device it names; distributions
        unvalidated (their checks read values, which the meta device has not)."""
        torch = self.torch
        validate = torch.distributions.Distribution._validate_args
        torch.distributions.Distribution.set_default_validate_args(False)
        try:
            with torch.device(device), _on_device(torch, device), warnings.catch_warnings():
                warnings.simplefilter("ignore")  # the problem's own warnings are not the import's output
                yield
        finally:
            torch.distributions.Distribution.set_default_validate_args(validate)

    def inputs(self, values: dict[str, int], device: str) -> list:
        """``get_inputs()`` at these sizes, made on ``device``: tensors, and Python numbers (``forward(x, s)``),
        which the kernel receives as scalars."""
        self.apply(values)
        torch = self.torch
        try:
            with self.on(device):
                made = self.namespace["get_inputs"]()
        except Exception as exc:
            raise self.error("get_inputs", "raised", exc) from None
        if not isinstance(made, (list, tuple)) or not made:
            raise Unfit(self.path, "get_inputs", f"returns {made!r:.60}, not a list of tensors")
        for i, item in enumerate(made):
            if isinstance(item, torch.Tensor):
                continue
            if not _is_number(item):
                raise Unfit(self.path, "get_inputs", f"item {i} is a {type(item).__name__}, not a tensor or a number: "
                                                     "a kernel takes tensors, their sizes and numbers only")
            if not math.isfinite(item) or (isinstance(item, int) and not INT32[0] <= item <= INT32[1]):
                raise Unfit(self.path, "get_inputs", f"item {i} is {item!r}: a number the kernel receives must be "
                                                     "finite, and an int within 32 bits")
        return list(made)

    def model(self, values: dict[str, int], device: str, seed: int):
        """``Model(*get_init_inputs())`` at these sizes, seeded, made on ``device``."""
        self.apply(values)
        torch = self.torch
        try:
            with self.on(device):
                torch.manual_seed(seed)
                model = self.namespace["Model"](*self.namespace["get_init_inputs"]())
        except Exception as exc:
            raise self.error("Model", "construction raised", exc) from None
        if not isinstance(model, torch.nn.Module):  # its parameters are read as a module's
            raise ExperimentError(self.path, "Model", f"makes a {type(model).__name__}, not a torch.nn.Module")
        return model

    def forward(self, model, inputs: list, device: str):
        try:
            with self.torch.no_grad(), self.on(device):
                return model(*inputs)
        except Exception as exc:
            raise self.error("forward", "raised", exc) from None

    def layout(self, values: dict[str, int], seed: int = 0, twice: bool = True) -> Layout:
        """What crosses the boundary at these sizes: on the meta device, else on the CPU (``twice``,
        with different inputs: an output shape that changes depends on the data, and is refused)."""
        try:
            return self._layout(values, "meta", seed)
        except Unfit:
            raise
        except ExperimentError as exc:
            self._cpu_can_hold(values, exc)
            first = self._layout(values, "cpu", seed)
        if not twice:
            return first
        second = self._layout(values, "cpu", seed + 1)
        if [t.shape for t in first.outputs] != [t.shape for t in second.outputs]:
            raise ExperimentError(self.path, "forward", "its output shape depends on the input data (a kernel's "
                                                        "outputs need shapes known from the sizes)")
        return first

    def _layout(self, values: dict[str, int], device: str, seed: int) -> Layout:
        from torch.utils.flop_counter import FlopCounterMode

        torch = self.torch
        torch.manual_seed(seed)
        inputs = self.inputs(values, device)
        model = self.model(values, device, seed)
        counter = FlopCounterMode(display=False)
        with counter:
            result = self.forward(model, inputs, device)
        outputs = result if isinstance(result, (tuple, list)) else [result]
        if not outputs or not all(isinstance(o, torch.Tensor) for o in outputs):
            kinds = ", ".join(sorted({type(o).__name__ for o in outputs})) or "nothing"
            raise Unfit(self.path, "forward", f"returns {kinds}, not a tensor or a tuple of tensors: a kernel "
                                                        "writes tensors only")
        state = [*model.named_parameters(), *model.named_buffers()]
        counts = counter.get_flop_counts().get("Global", {})
        flops = sum(v for op, v in counts.items() if str(op).split(".")[-1] in _MATMUL_OPS)
        return Layout(inputs=[_input(i, t) for i, t in enumerate(inputs)],
                      state=[Tensor(name, _dtype(t), tuple(t.shape)) for name, t in state],
                      outputs=[Tensor(f"#{i}", _dtype(t), tuple(t.shape)) for i, t in enumerate(outputs)],
                      matmul_flops=int(flops), flops=int(sum(counts.values())))

    def input_layout(self, values: dict[str, int]) -> Layout | None:
        """The inputs alone at these sizes, made on the meta device (nothing computed, ``forward``
        not run); None when ``get_inputs()`` cannot run there."""
        try:
            made = self.inputs(values, "meta")
        except ExperimentError:
            return None
        return Layout(inputs=[_input(i, t) for i, t in enumerate(made)], state=[],
                      outputs=[])

    def _cpu_can_hold(self, values: dict[str, int], why: ExperimentError) -> None:
        """Refuse a CPU run whose inputs (made on the meta device) would not fit in CPU_BYTES."""
        try:
            made = self.inputs(values, "meta")
        except ExperimentError:
            made = None
        nbytes = sum(t.numel() * t.element_size() for t in made if not _is_number(t)) if made is not None else None
        if nbytes is None or 4 * nbytes > CPU_BYTES:
            size = f"{nbytes / 2**30:.1f} GiB of inputs" if nbytes is not None else "inputs of unknown size"
            raise ExperimentError(self.path, why.field, f"{why.message} on torch's meta device, and with {size} "
                                                        "it is not run on the CPU to learn its shapes") from None

    def check_deterministic(self, values: dict[str, int], seed: int) -> bool:
        """The same inputs give the same outputs twice on the CPU (a reference must be a function).
        False when the problem at these sizes is too large for the CPU (nothing was checked)."""
        torch = self.torch
        if 3 * self.layout(values, twice=False).nbytes() > CPU_BYTES:
            return False
        torch.manual_seed(seed)
        inputs = self.inputs(values, "cpu")
        model = self.model(values, "cpu", seed)
        first, second = (self.forward(model, [t if _is_number(t) else t.clone() for t in inputs], "cpu")
                         for _ in range(2))
        pairs = zip(first, second, strict=True) if isinstance(first, (tuple, list)) else [(first, second)]
        if not all(_same(torch, a, b) for a, b in pairs):
            raise ExperimentError(self.path, "forward", "gives different outputs for the same inputs (dropout or "
                                                        "another random operation in training mode?): a reference "
                                                        "must be a function of its inputs")
        return True

    def works(self, values: dict[str, int]) -> bool:
        """Whether the problem runs at these sizes (on the meta device, or the CPU where it must)."""
        try:
            self.layout(values, twice=False)
        except ExperimentError:
            return False
        finally:
            self.apply(self.defaults)
        return True

    def forward_source(self) -> str:
        """The Model class as written (for the description)."""
        node = next((n for n in self.tree.body if isinstance(n, ast.ClassDef) and n.name == "Model"), None)
        return ast.get_source_segment(self.source, node) or "" if node else ""

    def docstrings(self) -> tuple[str, str]:
        """The Model class's docstring and its forward's."""
        model = self.namespace["Model"]
        return _clean(model.__doc__), _clean(getattr(model.forward, "__doc__", None))


# matrix products: the only operations whose flops are declared (a convolution may be computed
# with fewer multiplications than its direct form, so its count could make the floor reject an
# honest kernel)
_MATMUL_OPS = {"mm", "addmm", "bmm", "baddbmm"}


ITEMSIZE = {"float64": 8, "int64": 8, "float32": 4, "int32": 4, "float16": 2, "bfloat16": 2, "int16": 2,
             "int8": 1, "uint8": 1, "bool": 1}


def _on_device(torch, device: str):
    """A torch function mode that makes every tensor on one device: an explicit ``device=``,
    ``.cuda()`` and ``.to("cuda")`` included (a problem may name the GPU; the probes run elsewhere)."""
    from torch.overrides import TorchFunctionMode

    target = torch.device(device)

    class OnDevice(TorchFunctionMode):
        def __torch_function__(self, func, types, args=(), kwargs=None):
            kwargs = dict(kwargs or {})
            if kwargs.get("device") is not None:
                kwargs["device"] = target
            if func is torch.Tensor.cuda:
                return args[0].to(target)
            if func is torch.Tensor.to:
                args = tuple(target if isinstance(a, (str, torch.device)) else a for a in args)
            return func(*args, **kwargs)

    return OnDevice()


def _same(torch, a, b) -> bool:
    """Equal, element for element, NaN where the other is NaN."""
    if not a.is_floating_point():
        return torch.equal(a, b)
    return a.shape == b.shape and bool(torch.isclose(a, b, rtol=0, atol=0, equal_nan=True).all())


def _dtype(tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def _input(position: int, item) -> Tensor:
    """A forward argument as the layout holds it: a tensor's type and shape, or a number's value."""
    if _is_number(item):
        return Tensor(f"#{position}", "int" if _is_int(item) else "float", (), value=item)
    return Tensor(f"#{position}", _dtype(item), tuple(item.shape))


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    """A Python int or float (not a bool: a flag is not data a kernel is given)."""
    return _is_int(value) or isinstance(value, float)


def _clean(doc: str | None) -> str:
    import inspect

    return inspect.cleandoc(doc) if doc else ""
