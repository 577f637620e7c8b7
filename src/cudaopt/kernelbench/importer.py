"""``cudaopt import kernelbench PROBLEM.py --out DIR``: a KernelBench problem as a complete experiment.

Writes ``experiment.json`` (description, signature, the PyTorch reference, no initial kernel:
a model writes the first one; PyTorch eager and ``torch.compile`` as vendors; the precision
policy its tensor types allow; KernelBench's own distributions and tolerances beside the ones used), ``input_cases.json``, ``reference.py`` and
``vendor.py`` (glue.py), then loads the result as any experiment is loaded, so what was written is
known to be valid. translate.py says how a problem maps to an experiment; discriminate.py makes
its cases discriminate (negative controls on the CPU).
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from ..config import CasesFile, ExperimentConfig, KernelBenchOrigin, VendorSection
from ..errors import ExperimentError
from ..experiment import Experiment, load_experiment
from ..worker.inputs import InputError
from ..worker.reference import ReferenceFailure, load_python
from ..wire.precision import dtype_classes
from ..wire.protocol import Limits
from .discriminate import discriminate
from .glue import reference_source, vendor_source
from .problem import Layout, Problem
from .translate import Translation, translate

KERNELBENCH_TOLERANCE = 1e-2  # KernelBench's atol and rtol
FILES = ("experiment.json", "input_cases.json", "reference.py", "vendor.py")


@dataclass
class Imported:
    experiment: Experiment
    folder: Path
    notes: list[str]


def import_problem(path: Path, out: Path, *, name: str | None = None, seed: int = 42, rtol: float | None = None,
                   atol: float | None = None, force: bool = False,
                   on_layout: Callable[[Layout], None] | None = None) -> Imported:
    """Translate the problem at ``path`` and write its experiment into ``out``. Tolerances not
    given come from the problem's ``TASK_CONFIG`` (``atol``, ``rtol``) where it has one, else
    KernelBench's 1e-2. ``on_layout`` is told the problem's sizes as they become known: its inputs
    (before ``forward`` runs), then everything that crosses the boundary (isolated.py's limit)."""
    try:
        import torch
    except ImportError as exc:
        raise ExperimentError(path, "", f"importing a KernelBench problem needs PyTorch ({exc}): "
                                        "pip install -e '.[torch]' in cudaopt's checkout") from None
    if not path.is_file():
        raise ExperimentError(path, "", "not found")
    if out.exists() and not out.is_dir():
        raise ExperimentError("--out", "", f"{out}: exists and is not a folder")
    present = [f for f in FILES if (out / f).exists()]
    if present and not force:
        raise ExperimentError("--out", "", f"{out} already holds {', '.join(present)} (--force replaces them)")
    problem = Problem(path, torch)
    if on_layout is not None and (inputs := problem.input_layout(problem.defaults)) is not None:
        on_layout(inputs)
    declared = problem.namespace.get("TASK_CONFIG")
    declared = declared if isinstance(declared, dict) else {}
    rtol, atol = (given if given is not None else _tolerance(path, declared, key)
                  for given, key in ((rtol, "rtol"), (atol, "atol")))
    t = translate(problem, name=name or path.stem, seed=seed, rtol=rtol, atol=atol, on_layout=on_layout)
    out.mkdir(parents=True, exist_ok=True)
    reference = reference_source(problem, t, seed)
    (out / "reference.py").write_text(reference)
    try:
        made = discriminate(path.name, t.signature, t.cases, load_python(reference, str(out / "reference.py"),
                                                                         t.signature.name), t.inputs, rtol, atol)
    except (ReferenceFailure, InputError) as exc:
        raise ExperimentError(path, "forward", f"the imported reference fails on the CPU: {exc}") from None
    cases = CasesFile(launch=t.launch, cases=made.cases)
    vendors = [VendorSection(file="vendor.py", function="pytorch_eager", label="PyTorch eager", arrays="torch",
                             returns=True, pytorch="eager"),
               VendorSection(file="vendor.py", function="pytorch_compile", label="torch.compile", arrays="torch",
                             returns=True, pytorch="compile")]
    config = ExperimentConfig(description=describe(problem, t, made.origin), signature=str(t.signature),
                              reference="reference.py", reference_kind="torch", input_cases="input_cases.json",
                              vendor=vendors, limits=Limits(precision=precision(t)), kernelbench=made.origin)
    problem.apply(problem.defaults)
    (out / "vendor.py").write_text(vendor_source(problem, t, seed))
    (out / "input_cases.json").write_text(json.dumps(_cases_json(cases), indent=2) + "\n")
    data = config.model_dump(mode="json", exclude_defaults=True)
    (out / "experiment.json").write_text(json.dumps(data, indent=2) + "\n")
    return Imported(experiment=load_experiment(out / "experiment.json"), folder=out,
                    notes=list(dict.fromkeys(t.notes + made.notes)))


def precision(t: Translation) -> list[str]:
    """The precision policy written into the experiment, from the problem's tensor types: FP32 and
    FP64 problems get no reduced-precision math, a float16 or bfloat16 one that class (and int8
    data the integer MMAs); bool tensors, which travel as uint8, allow nothing."""
    return dtype_classes(a.dtype for a in t.signature.args if a.pointer and a.name not in t.bools)


def _cases_json(cases: CasesFile) -> dict:
    """The cases as a user would write them: defaults left out, except each input's distribution
    and its parameters, spelled out."""
    data = cases.model_dump(mode="json", exclude_defaults=True)
    for case, spec in zip(data["cases"], cases.cases, strict=True):
        for name, item in case["inputs"].items():
            init = spec.inputs[name].init
            keys = ("mean", "std") if init.dist == "normal" else ("low", "high")
            item["init"] = {"dist": init.dist, **{k: getattr(init, k) for k in keys}}
    return data


def describe(problem: Problem, t: Translation, origin: KernelBenchOrigin | None = None) -> str:
    """What the model reads: the problem's docstrings, the contract, and the Model's code."""
    model_doc, forward_doc = problem.docstrings()
    sig = t.signature
    lines = [f"KernelBench problem {problem.path.name}." + (f" {model_doc}" if model_doc else "")]
    if forward_doc:
        lines.append(f"forward: {forward_doc.split(chr(10) + chr(10))[0]}")
    lines.append(f"Compute Model.forward of the module below for the inputs {', '.join(t.inputs)}; every tensor is "
                 "contiguous and row-major with the shapes of the input cases, its dimensions given as the int "
                 "scalars. The model runs in its default (training) mode, as KernelBench runs it.")
    if t.state:
        pairs = ", ".join(f"{arg} = Model.{path}" for arg, path in t.state.items())
        lines.append(f"The model's parameters are inputs of the kernel (their values are drawn like the inputs): "
                     f"{pairs}.")
    if t.bools:
        lines.append(f"{', '.join(t.bools)}: bool tensors, passed as one byte per element (0 or 1).")
    numbers = [a for a in sig.scalars if a.name in t.inputs]
    if numbers:
        one = len(numbers) == 1
        lines.append(f"{', '.join(a.c_decl() for a in numbers)}: {'a number' if one else 'numbers'} forward takes, "
                     f"as get_inputs() gives {'it' if one else 'them'} (the same in every case), passed as "
                     f"{'a kernel scalar' if one else 'kernel scalars'}.")
    lines.append(f"Outputs: {', '.join(a.name for a in sig.outputs)}.")
    constants = [s.scalar for s in t.sizes]
    if constants:
        lines.append(f"Scalars named after the module's size constants: {', '.join(constants)}.")
    lines.append("```python\n" + problem.forward_source() + "\n```")
    added = [name for name, case in (origin.cases if origin else {}).items() if case.added]
    if added:
        lines.append(f"The correctness case {added[0]} draws every floating input from a wide normal distribution "
                     "centred on zero (negative values, large magnitudes), to exercise every branch of the operation.")
    if origin and origin.changes:
        lines.append("Inputs and tolerances differ from KernelBench's where its own could not tell a wrong kernel from "
                     "a right one: " + "; ".join(origin.changes) + ".")
    return "\n".join(lines)


def _tolerance(path: Path, declared: dict, key: str) -> float:
    """TASK_CONFIG's rtol or atol: a finite number, at least 0."""
    value = declared.get(key, KERNELBENCH_TOLERANCE)
    try:
        number = float(value)
    except (TypeError, ValueError, OverflowError):
        number = math.nan
    if isinstance(value, bool) or not math.isfinite(number) or number < 0:
        raise ExperimentError(path, f"TASK_CONFIG.{key}", f"{value!r} is not a tolerance: a finite number, at least 0")
    return number
