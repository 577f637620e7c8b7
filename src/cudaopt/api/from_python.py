"""``api.experiment``: an experiment built in Python, for users who know kernel_tuner's
``tune_kernel`` or KernelBench's ``Model``/``get_inputs``: a PyTorch (or NumPy) reference function,
example inputs and the kernel's signature; no JSON to write.

It writes the files a user would have written (``experiment.json``, ``input_cases.json``,
``reference.py``, the kernel, ``vendor.py``) and loads them as every experiment is loaded, so
everything downstream is the same: the checks, the requests, the lock, the run directory (a run of an
experiment kept in cudaopt's cache copies its files into the run, so it stays replayable).

How the examples become cases: each example (a mapping of the signature's names to an input array
or a scalar value) is a performance case at its sizes, the first one again as a holdout with another
seed (for ``verify``). Each input is drawn from a distribution fitted to the example's values; each
dimension is written as the scalar that has its size in every example (a literal where none has),
each output's shape read off what the reference returns on the first example. A PyTorch reference
also serves as the vendor baselines, PyTorch eager and ``torch.compile``, timed beside the kernel.

Long because every argument a caller may get wrong is checked here, before anything is written,
and named as the argument it is: the files it writes are not the caller's.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import math
import numbers
import os
import re
import shutil
import textwrap
import types
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from ..config import CasesFile, ExperimentConfig, TuneSection, VendorSection
from ..errors import ExperimentError, shortened, validation_message
from ..experiment import Experiment, ExperimentArgs
from ..worker.reference import named_outputs
from ..kernelbench.translate import fit
from ..paths import cache_root, check_writable_folder
from ..reading import missing_file, read_text_file
from ..trial import LaunchGiven, as_launch
from ..wire.protocol import CaseSpec, InputSpec, OutputSpec
from ..wire.fields import unusable_name
from .arguments import path_of
from ..wire.signature import Signature, SignatureError, parse_signature
from .experiments import PathArg

EXPERIMENTS = "experiments"  # under the cache root: experiments made in Python without a folder of their own
HOLDOUT_SEED = 1009
_VENDORS = '''

# --- written by cudaopt: the reference as the PyTorch baselines the kernel is timed beside ---
import torch as _torch

_COMPILED = []


def pytorch_eager({params}):
    """PyTorch eager: the reference itself."""
    with _torch.no_grad():
        return {entry}({arguments})


def pytorch_compile({params}):
    """torch.compile of the reference (compiled at the first call, outside any timing)."""
    if not _COMPILED:
        _COMPILED.append(_torch.compile({entry}))
    with _torch.no_grad():
        return _COMPILED[0]({arguments})
'''


def experiment(reference: Callable, inputs: Mapping[str, Any] | Sequence[Mapping[str, Any]], *, signature: str,
               kernel: PathArg | None = None, launch: LaunchGiven = None, description: str = "",
               rtol: float = 1e-4, atol: float = 1e-4, tunables: Mapping[str, Sequence] | None = None,
               restrictions: Sequence[str] = (), folder: PathArg | None = None, force: bool = False) -> Experiment:
    """An experiment from a reference function and example inputs.

    ``reference`` takes every input and scalar of ``signature`` by name and returns the output (a
    dict by name, or a sequence in signature order, when there are several). ``inputs``: one example
    or a list, each mapping every ``const T*`` argument to an array (a torch tensor or a NumPy
    array) and every scalar to its value. ``kernel``: the kernel to start from (a ``.cu`` file, or
    its source text); ``launch``: how every case launches it (grid and block expressions over the
    scalars, or a tier table); ``rtol``/``atol``: each output's tolerances. ``tunables``
    (name -> values, with ``restrictions``) make the kernel tunable (``strategy="tune"``), its
    launch expressions may use them. The files go to ``folder`` (default: cudaopt's cache, named by
    their content); a folder holding another experiment's files is refused unless ``force``."""
    _check_arguments(signature, rtol, atol, description, tunables, restrictions)
    try:
        sig = parse_signature(signature)
    except SignatureError as exc:
        raise ExperimentError("signature", "", str(exc)) from None
    examples = _examples(inputs)
    torch_kind = any(_is_torch(v) for e in examples for v in e.values())
    arrays = [_arrays(sig, e, i) for i, e in enumerate(examples)]
    outputs = _outputs(reference, sig, examples[0])
    files = {"reference.py": function_module(reference)}
    source = _kernel_text(kernel, sig) if kernel is not None else None
    if source is not None:
        files[f"{sig.name}.cu"] = source
    elif tunables:
        raise ExperimentError("tunables", "", "tune a kernel: give it (kernel=...)")
    cases = _cases(sig, arrays, outputs, rtol, atol)
    vendors = []
    if torch_kind:
        files["vendor.py"] = files["reference.py"] + _vendor_calls(sig, reference.__name__)
        vendors = [VendorSection(file="vendor.py", function=f"pytorch_{kind}", label=label, arrays="torch",
                                 returns=True, pytorch=kind)
                   for kind, label in (("eager", "PyTorch eager"), ("compile", "torch.compile"))]
    spec = as_launch(launch)
    if spec is None:
        raise ExperimentError("launch", "", "missing: how every case launches the kernel (grid and block, "
                                            "expressions over the scalars: {\"grid\": [\"cdiv(n, 256)\"], "
                                            "\"block\": [256]})")
    tune, cases_launch = None, spec
    if tunables:
        try:
            tune = TuneSection(kernel=f"{sig.name}.cu", tunables={k: list(v) for k, v in tunables.items()},
                               restrictions=list(restrictions), launch=spec)
        except ValidationError as exc:  # a value no tunable takes (None, NaN, a dict), a name that is no string
            field, message = validation_message(exc, TuneSection)
            top = re.match(r"\w*", field).group()
            raise ExperimentError(top or "tunables", field[len(top):].lstrip("."), message) from None
        # the kernel as given (no tunable defined) launches with each tunable's first value
        cases_launch = spec.model_copy(update={"let": {**{k: v[0] for k, v in tunables.items()}, **(spec.let or {})}})
    config = ExperimentConfig(description=description or (inspect.getdoc(reference) or ""), signature=str(sig),
                              reference="reference.py", reference_entry=reference.__name__,
                              reference_kind="torch" if torch_kind else "numpy",
                              initial_kernel=f"{sig.name}.cu" if source is not None else None,
                              input_cases="input_cases.json", vendor=vendors, tune=tune)
    files["input_cases.json"] = CasesFile(launch=cases_launch, cases=cases).to_json(indent=2) + "\n"
    files["experiment.json"] = json.dumps(config.model_dump(mode="json", exclude_defaults=True), indent=2) + "\n"
    where = _folder(folder) if folder is not None else _cache_folder(files)
    others = [name for name, text in files.items() if (where / name).is_file() and _text(where / name) != text]
    if others and not force:
        raise ExperimentError("folder", "", f"{where} already holds another experiment's {', '.join(others)} "
                                            "(force=True replaces them)")
    try:
        where.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (where / name).write_text(text)
    except OSError as exc:  # a mount's rules, a full disk: refused after the checks said it could be written
        raise ExperimentError("folder", "", f"{where}: cannot be written: {exc.strerror or exc}") from None
    try:
        return ExperimentArgs(config=str(where.resolve() / "experiment.json")).load()
    except ExperimentError as exc:
        if folder is None:  # nothing broken is left in the cache
            shutil.rmtree(where, ignore_errors=True)
        raise _as_argument(exc, where, sig.name) from None


def _as_argument(exc: ExperimentError, where: Path, entry: str) -> ExperimentError:
    """A problem found in a file this function wrote, named by the argument it came from: the
    caller never saw the file."""
    if Path(exc.file).resolve().parent != where.resolve():
        return exc
    name, field = Path(exc.file).name, exc.field
    if name == "input_cases.json" and field.startswith("launch"):
        return ExperimentError("launch", field.removeprefix("launch").lstrip("."), exc.message)
    if name == f"{entry}.cu":
        return ExperimentError("kernel", field, exc.message)
    if name == "experiment.json" and field.startswith("tune"):
        which = "restrictions" if field.startswith("tune.restrictions") else "tunables"
        return ExperimentError(which, field.removeprefix(f"tune.{which}").lstrip("."), exc.message)
    return ExperimentError(f"{name} (made from the arguments)", field, exc.message)


def _check_arguments(signature, rtol, atol, description, tunables, restrictions) -> None:
    """The arguments that are not examples, of the types they must have: a mistyped one would
    otherwise fail deep inside, in the files' validation, naming a field of a file the caller
    never wrote."""
    if not isinstance(signature, str):
        raise ExperimentError("signature", "", f"a value of type {type(signature).__name__} is no signature: give the "
                                               "kernel's declaration as a string")
    for name, value in (("rtol", rtol), ("atol", atol)):
        if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value) or value < 0:
            raise ExperimentError(name, "", f"{value!r} is not a tolerance (a finite number, 0 or more)")
    if description is not None and not isinstance(description, str):
        raise ExperimentError("description", "", f"a value of type {type(description).__name__} is not text")
    if tunables is not None and not isinstance(tunables, Mapping):
        raise ExperimentError("tunables", "", "give each tunable's name and its values: {\"BLOCK\": [128, 256]}")
    for name, values in (tunables or {}).items():
        if not isinstance(name, str):
            raise ExperimentError("tunables", repr(name), "a tunable's name is a string (a name the launch may use)")
        if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) or not values:
            raise ExperimentError("tunables", str(name), f"{values!r}: give the values it takes, a non-empty list")
    if isinstance(restrictions, (str, bytes)) or not isinstance(restrictions, Sequence):
        raise ExperimentError("restrictions", "", "give a list of conditions on the tunables: [\"BLOCK >= 64\"]")


def _folder(folder) -> Path:
    """The folder the files go to, checked before anything is written."""
    where = path_of(folder, "folder")
    if not str(folder).strip():
        raise ExperimentError("folder", "", "an empty path: give the folder the experiment's files go to")
    check_writable_folder(where, "folder")
    return where


def _text(path: Path) -> str | None:
    """A file's text, or None where it is not text this experiment could have written."""
    try:
        return path.read_text()
    except (OSError, UnicodeDecodeError):
        return None


def made_in_cache(experiment: Experiment) -> Path | None:
    """The folder of an experiment :func:`experiment` wrote into cudaopt's cache (None otherwise):
    a run copies it, so that it stays replayable when the cache is cleared."""
    config = experiment.args.config if experiment.args is not None else None
    if config is None:
        return None
    root = (cache_root() / EXPERIMENTS).resolve()
    folder = Path(config).resolve().parent
    return folder if root in folder.parents else None


def _cache_folder(files: dict[str, str]) -> Path:
    digest = hashlib.sha256(json.dumps(files, sort_keys=True).encode()).hexdigest()[:16]
    return cache_root() / EXPERIMENTS / digest


def _examples(inputs) -> list[dict]:
    """The examples ``inputs`` gives: one mapping, or a sequence of them."""
    if isinstance(inputs, Mapping):
        return [dict(inputs)]
    if isinstance(inputs, (str, bytes)) or not isinstance(inputs, Iterable):
        raise ExperimentError("inputs", "", f"a value of type {type(inputs).__name__} is no example: give a mapping "
                                            "of the signature's names to arrays and scalars, or a list of them")
    examples = list(inputs)
    for i, example in enumerate(examples):
        if not isinstance(example, Mapping):
            raise ExperimentError(f"inputs[{i}]", "", f"a value of type {type(example).__name__} is no example: give "
                                                      "a mapping of the signature's names to arrays and scalars")
    if not examples:
        raise ExperimentError("inputs", "", "give at least one example (a mapping of the signature's names)")
    return [dict(e) for e in examples]


def _is_torch(value) -> bool:
    return type(value).__module__.split(".")[0] == "torch" and hasattr(value, "detach")


def _numpy(value) -> np.ndarray:
    """``value`` as a NumPy array; bfloat16, which NumPy lacks, as float32. ValueError says why it is
    none (a ragged list, a tensor with no data on the CPU, a sparse one)."""
    try:
        if _is_torch(value):
            tensor = value.detach().cpu()
            return (tensor.float() if str(tensor.dtype) == "torch.bfloat16" else tensor).numpy()
        return np.asarray(value)
    except (TypeError, ValueError, RuntimeError, NotImplementedError) as exc:
        raise ValueError(shortened(str(exc), 120)) from None


def _arrays(sig: Signature, example: dict, index: int) -> dict:
    """An example's inputs as NumPy arrays and its scalars, every name of the signature given once."""
    where = f"inputs[{index}]"
    given = set(example)
    expected = {a.name for a in sig.args if not a.is_output}
    if given - expected:
        extra = sorted(given - expected)[0]
        outputs = {a.name for a in sig.outputs}
        why = "an output (the reference returns it)" if extra in outputs else "not an input or a scalar of the signature"
        raise ExperimentError(where, extra, why)
    if expected - given:
        raise ExperimentError(where, sorted(expected - given)[0], "missing: give every input array and scalar value")
    out = {}
    for arg in sig.args:
        if arg.is_output:
            continue
        value = example[arg.name]
        if arg.pointer:
            try:
                array = _numpy(value)
            except ValueError as exc:
                raise ExperimentError(where, arg.name,
                                      f"not an array of numbers ({type(value).__name__}: {exc})") from None
            if array.dtype.kind not in "biuf" or array.ndim == 0:
                raise ExperimentError(where, arg.name, f"not an array of numbers ({type(value).__name__})")
            bad = array.size - int(np.count_nonzero(np.isfinite(array)))
            if bad:
                raise ExperimentError(where, arg.name, f"{bad} NaN or infinite value(s): each input is drawn from a "
                                                       "distribution fitted to the example's values; give finite ones")
            out[arg.name] = array
        elif isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
            raise ExperimentError(where, arg.name, f"{value!r} is not a number (a scalar of the signature)")
        else:
            out[arg.name] = value.item() if isinstance(value, np.generic) else value
    return out


def _outputs(reference: Callable, sig: Signature, example: dict) -> dict[str, tuple[int, ...]]:
    """Each output's shape, as the reference returns it on the first example: an array of numbers
    with at least one element (an empty output checks nothing)."""
    try:
        result = reference(**{a.name: example[a.name] for a in sig.args if not a.is_output})
        named = named_outputs(result, [a.name for a in sig.outputs])
    except Exception as exc:
        raise ExperimentError("reference", "", f"on inputs[0]: {type(exc).__name__}: {exc}") from None
    except SystemExit as exc:  # the caller's program goes on: an exit is the reference's failure
        raise ExperimentError("reference", "", f"on inputs[0]: exited (SystemExit {exc.code!r}) instead of "
                                               "returning its output") from None
    shapes = {}
    for name, value in named.items():
        try:
            array = _numpy(value)
        except ValueError as exc:
            array, why = None, str(exc)
        if array is None or array.dtype.kind not in "biuf" or array.size == 0:
            what = why if array is None else "an empty array" if array.dtype.kind in "biuf" else f"dtype {array.dtype}"
            raise ExperimentError("reference", "", f"on inputs[0]: returned {type(value).__name__} ({what}) for "
                                                   f"{name}, not an array of numbers with at least one element")
        shapes[name] = tuple(array.shape)
    return shapes


def _dimension(sizes: list[int], scalars: list[str], examples: list[dict], what: str) -> str | int:
    """A dimension (its size in each example) as the scalar that has that size in every example,
    else the number, which must then be the same in every example."""
    for name in scalars:
        if all(e[name] == size for e, size in zip(examples, sizes, strict=True)):
            return name
    if len(set(sizes)) > 1:
        raise ExperimentError("inputs", what, f"sizes {sizes} in the examples, and no scalar has them: give the "
                                              "size as a scalar of the signature")
    return sizes[0]


def _cases(sig: Signature, arrays: list[dict], outputs: dict, rtol: float, atol: float) -> list[CaseSpec]:
    scalars = [a.name for a in sig.scalars]
    for arg in sig.inputs:
        if len({values[arg.name].ndim for values in arrays}) > 1:
            raise ExperimentError("inputs", arg.name, "has a different number of dimensions in the examples")
    shapes = {arg.name: [_dimension([v[arg.name].shape[d] for v in arrays], scalars, arrays, f"{arg.name}[{d}]")
                         for d in range(arrays[0][arg.name].ndim)] for arg in sig.inputs}
    shapes |= {name: [_dimension([n], scalars, arrays[:1], f"{name}[{d}]") for d, n in enumerate(shape)]
               for name, shape in outputs.items()}
    cases = []
    for i, values in enumerate(arrays):
        inputs = {arg.name: InputSpec(shape=shapes[arg.name],
                                      init=fit(values[arg.name].reshape(-1).astype(np.float64), arg.dtype)[0])
                  for arg in sig.inputs}
        out = {name: OutputSpec(shape=shapes[name], rtol=rtol, atol=atol) for name in outputs}
        cases.append(CaseSpec(name="example" if len(arrays) == 1 else f"example-{i}", role="performance", seed=i + 1,
                              scalars={name: values[name] for name in scalars}, inputs=inputs, outputs=out))
    cases.append(cases[0].model_copy(update={"name": "holdout", "role": "holdout", "seed": HOLDOUT_SEED}))
    return cases


def _kernel_text(kernel: PathArg, sig: Signature) -> str:
    """The kernel's source: the file ``kernel`` names, or ``kernel`` itself when it is source text."""
    if not isinstance(kernel, (str, os.PathLike)):
        raise ExperimentError("kernel", "", f"a value of type {type(kernel).__name__} is neither a .cu file nor the "
                                            "kernel's source")
    text = str(kernel)
    if "__global__" in text:
        return text if text.endswith("\n") else text + "\n"
    path = Path(kernel)
    why = unusable_name(text) or (f"{path}: {missing_file(path)}" if missing_file(path) else None)
    if why is not None:
        raise ExperimentError("kernel", "", f"{why} (give a .cu file or the kernel's source)")
    return read_text_file(path, "kernel")


def _vendor_calls(sig: Signature, entry: str) -> str:
    """The vendor functions: every argument of the signature by name (outputs too), the reference
    called on the inputs and scalars, its outputs returned."""
    given = [a.name for a in sig.args if not a.is_output]
    return _VENDORS.format(params=", ".join(a.name for a in sig.args), entry=entry,
                           arguments=", ".join(f"{n}={n}" for n in given))


def function_module(fn: Callable) -> str:
    """A module that defines ``fn`` as it is: its source, and what it uses from its own module
    (modules imported, functions defined beside it, constants), so that the worker loads it alone."""
    if not isinstance(fn, types.FunctionType) or fn.__name__ == "<lambda>":
        raise ExperimentError("reference", "", "give a function defined with def (its source is written to "
                                               "reference.py)")
    head: list[str] = []
    bodies: list[str] = []
    _collect(fn, head, bodies, set())
    return "\n".join(dict.fromkeys(head)) + ("\n\n\n" if head else "") + "\n\n\n".join(bodies) + "\n"


def _collect(fn: types.FunctionType, head: list[str], bodies: list[str], seen: set[str]) -> None:
    if fn.__name__ in seen:
        return
    seen.add(fn.__name__)
    try:
        source = textwrap.dedent(inspect.getsource(fn))
    except (OSError, TypeError):
        raise ExperimentError("reference", fn.__name__, "its source cannot be read (define it in a file or a "
                                                        "notebook cell)") from None
    if fn.__closure__:
        raise ExperimentError("reference", fn.__name__, "uses variables of an enclosing function: define it at "
                                                        "the top level of its module")
    for name in _names(fn.__code__):
        if name in fn.__globals__:
            _dependency(name, fn.__globals__[name], fn, head, bodies, seen)
    bodies.append(source.rstrip())


def _names(code: types.CodeType) -> list[str]:
    """Every global a function's code (and the code nested in it) may read."""
    names = list(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names += _names(const)
    return list(dict.fromkeys(names))


def _dependency(name: str, value, fn, head: list[str], bodies: list[str], seen: set[str]) -> None:
    if isinstance(value, types.ModuleType):
        head.append(f"import {value.__name__}" if value.__name__ == name else f"import {value.__name__} as {name}")
    elif isinstance(value, types.FunctionType) and value.__module__ == fn.__module__:
        _collect(value, head, bodies, seen)
    elif isinstance(value, (int, float, str, bool, type(None))) or (
            isinstance(value, tuple) and all(isinstance(v, (int, float, str, bool)) for v in value)):
        head.append(f"{name} = {value!r}")
    elif getattr(value, "__module__", None) not in (None, "__main__", fn.__module__) and hasattr(value, "__qualname__"):
        head.append(f"from {value.__module__} import {value.__qualname__.split('.')[0]} as {name}")
    else:
        raise ExperimentError("reference", fn.__name__, f"uses {name} ({type(value).__name__}), which cannot be "
                                                        "written into reference.py: define it inside the function, "
                                                        "or give the reference as a file")
