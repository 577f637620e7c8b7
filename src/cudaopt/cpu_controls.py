"""Negative controls on the CPU, for ``cudaopt check`` (and ``evaluate``/``optimize``, which run its
checks first): a NumPy or PyTorch reference is run on two independent input sets of each case
small enough for the CPU, and worker/controls.py compares the trivial outputs with its answers,
as the GPU worker does at evaluation. A case larger than ``CPU_ELEMENTS`` is not shrunk in general
(a smaller case can discriminate where the large one does not: outputs that shrink with a
dimension, and which scalars a reference lets change is the user's business): it is controlled on
the GPU at evaluation, and the check says so. An imported KernelBench problem's cases have their
batch sizes halved until they fit (rows of a batch are independent), and the check says at which
sizes. A ``.cu`` reference runs only on the GPU.

The reference is the user's code: it runs in a subprocess with a timeout, and the cases it did
not finish in time are left to the GPU, said in the same way.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
from dataclasses import dataclass, field

import numpy as np

from .children import run_child
from .errors import ExperimentError
from .experiment import Experiment
from .worker.controls import ControlSet, judge, negative_controls
from .worker.inputs import InputError, generate, shape_of
from .wire.precision import allowed_math
from .wire.protocol import CaseSpec, ReferenceSpec, WireModel
from .wire.results import CaseResult, Controls
from .wire.signature import Signature, parse_signature
from .worker.reference import ReferenceFailure, call_python, load_python
from .worker.torch_reference import call_torch, import_torch

CPU_ELEMENTS = 1 << 23  # inputs and outputs of one input set: above this a case is controlled on the GPU
CONTROLS_TIMEOUT_S = 120.0


@dataclass
class CpuControls:
    """What the CPU found: each case's controls, and the cases left to the GPU with why."""
    done: dict[str, Controls] = field(default_factory=dict)
    on_gpu: dict[str, str] = field(default_factory=dict)
    shrunk: dict[str, str] = field(default_factory=dict)  # case -> the sizes it ran at on the CPU

    def lines(self) -> list[str]:
        """The check table's rows' text."""
        out = []
        ok = [name for name, c in self.done.items() if not c.accepted and name not in self.shrunk]
        if ok:
            tried = sum(self.done[n].tried for n in ok)
            out.append(f"{len(ok)} case(s) discriminate on the CPU ({tried} trivial outputs refused: zeros, "
                       f"ones, NaN, constants, input copies, stale answers): {', '.join(ok)}")
        for name, sizes in self.shrunk.items():
            if name in self.done and not self.done[name].accepted:
                out.append(f"{name}: discriminates on the CPU at {sizes} (its batch shrunk); the GPU controls it "
                           "at its own sizes at evaluation")
        for name, c in self.done.items():
            if c.accepted and c.waived:
                first = c.accepted[0]
                out.append(f"case {name}: output {first.output} accepts {first.trivial}; waived (trivial_ok): "
                           f"{c.waived}")
        groups: dict[str, list[str]] = {}
        for name, why in self.on_gpu.items():
            groups.setdefault(why, []).append(name)
        for why, names in groups.items():
            out.append(f"{', '.join(names)}: {why}; controlled on the GPU at evaluation")
        return out


class ControlsCall(WireModel):
    """What the subprocess of :func:`cpu_controls` is given."""
    reference: ReferenceSpec
    cases: list[CaseSpec]
    signature: str
    allow_tf32: bool = False


class CaseControls(WireModel):
    """One line of the subprocess's answer."""
    case: str
    controls: Controls


def elements(case: CaseSpec) -> int:
    return sum(int(np.prod(shape_of(s.shape, case.scalars, case.name), dtype=np.int64))
               for s in [*case.inputs.values(), *case.outputs.values()])


def batch_shrunk(case: CaseSpec) -> dict | None:
    """The case's scalars with its ``batch*`` sizes halved until it fits on the CPU (rows of a batch
    are independent: the outputs' scale stays the same); None where it never does. Used for
    imported KernelBench problems, whose references take any batch size."""
    scalars = dict(case.scalars)
    batch = [n for n in scalars if "batch" in n.lower() and isinstance(scalars[n], int)]
    while elements(case.model_copy(update={"scalars": scalars})) > CPU_ELEMENTS:
        if not any(scalars[n] > 1 for n in batch):
            return None
        scalars.update({n: max(1, int(scalars[n]) // 2) for n in batch})
    return scalars


def cpu_controls(experiment: Experiment, timeout_s: float = CONTROLS_TIMEOUT_S) -> CpuControls:
    """The controls of every case the CPU can run; ExperimentError (one line, exit 2) for a case
    that accepts a trivial output and gives no ``trivial_ok``."""
    found = CpuControls()
    kind = experiment.reference_kind
    cases = sorted(experiment.case_specs, key=elements)
    if kind == "cu":
        found.on_gpu = {c.name: "a .cu reference runs on the GPU only" for c in cases}
        return found
    small = []
    for case in cases:
        scalars = case.scalars if elements(case) <= CPU_ELEMENTS else \
            batch_shrunk(case) if experiment.kernelbench is not None else None
        if scalars is None:
            found.on_gpu[case.name] = f"too large for the CPU (over {CPU_ELEMENTS} elements)"
            continue
        if scalars != case.scalars:
            found.shrunk[case.name] = ", ".join(f"{n}={v}" for n, v in scalars.items() if v != case.scalars[n])
        small.append(case.model_copy(update={"scalars": scalars}))
    if kind == "torch" and not _has_torch():
        found.on_gpu = {c.name: "torch is not installed here" for c in cases}
        return found
    request = ControlsCall(reference=experiment.reference_spec(), cases=small, signature=experiment.signature_text,
                           allow_tf32="tf32" in allowed_math(experiment.limits, experiment.signature))
    try:
        done = run_child([sys.executable, "-m", "cudaopt.cpu_controls"], input=request.to_json(),
                         timeout=timeout_s)
        output, finished = done.stdout, True
    except subprocess.TimeoutExpired as exc:
        raw = exc.stdout or ""
        output, finished = raw.decode() if isinstance(raw, bytes) else raw, False
    said = ""
    for line in output.splitlines():
        if line.startswith("{"):
            item = CaseControls.model_validate_json(line)
            found.done[item.case] = item.controls
        elif line.strip():
            said = line.strip()
    for case in small:
        if case.name not in found.done:
            found.on_gpu[case.name] = (f"the reference did not finish within {timeout_s:g} s on the CPU"
                                       if not finished else f"the reference failed on the CPU ({said or 'no output'})")
    _refuse(experiment, found)
    return found


def _refuse(experiment: Experiment, found: CpuControls) -> None:
    for i, case in enumerate(experiment.case_specs):
        controls = found.done.get(case.name)
        refusal = judge(case, controls) if controls is not None else None
        if refusal:
            where = f" (on the CPU at {found.shrunk[case.name]})" if case.name in found.shrunk else ""
            raise ExperimentError(experiment.cases_path, f"cases[{i}]", f"non-discriminating{where}: {refusal}")


def refuse_results(experiment: Experiment, cases: list[CaseResult]) -> None:
    """The GPU's verdict, as the CPU's: a case the worker found non-discriminating is bad input
    (exit 2), on one line naming the case, the output and the trivial output."""
    refused = next((c for c in cases if c.status == "non_discriminating"), None)
    if refused is not None:
        index = next(i for i, c in enumerate(experiment.case_specs) if c.name == refused.name)
        raise ExperimentError(experiment.cases_path, f"cases[{index}]", f"non-discriminating: {refused.reason}")


def _has_torch() -> bool:
    import importlib.util

    return importlib.util.find_spec("torch") is not None


def reference_sets(fn, kind: str, signature: Signature, case: CaseSpec, allow_tf32: bool = False,
                   count: int = 2) -> list[ControlSet]:
    """``count`` independent input sets of ``case`` (as the worker draws its first ones) and the
    answers of the NumPy or PyTorch reference ``fn`` for them, on the CPU."""
    shapes = {a.name: shape_of(case.outputs[a.name].shape, case.scalars, a.name) for a in signature.outputs}
    sets = []
    for inputs in generate(case, signature, min(count, 2)):  # sets 0 and 1: independent draws
        if kind == "torch":
            torch = import_torch()
            tensors = {n: cpu_tensor(torch, t) for n, t in inputs.items()}
            answers = {n: v.numpy() for n, v in call_torch(torch, fn, signature, tensors, case.scalars, shapes,
                                                           allow_tf32).items()}
        else:
            answers = call_python(fn, signature, {n: t.as_numbers() for n, t in inputs.items()}, case.scalars, shapes)
        sets.append(ControlSet({n: (t.data, t.dtype) for n, t in inputs.items()},
                               {n: np.asarray(v, dtype=np.float64) for n, v in answers.items()}))
    return sets


def cpu_tensor(torch, tensor):
    """A host input as the torch tensor the GPU worker would hand over (bfloat16 as bfloat16)."""
    if tensor.dtype == "bfloat16":
        return torch.from_numpy(tensor.data.view(np.int16).copy()).view(torch.bfloat16)
    return torch.from_numpy(np.array(tensor.data))


def _controls_from_stdin() -> int:
    """The subprocess side: one JSON line per case as it is done (smallest first)."""
    request = ControlsCall.model_validate_json(sys.stdin.read())
    ref, signature = request.reference, parse_signature(request.signature)
    answers = sys.stdout  # the reference's own prints go to stderr: this pipe carries the answers alone
    try:
        with contextlib.redirect_stdout(sys.stderr):
            fn = load_python(ref.source, ref.path, ref.entry)
            for case in request.cases:
                sets = reference_sets(fn, ref.kind, signature, case, request.allow_tf32)
                print(CaseControls(case=case.name, controls=negative_controls(case, signature, sets)).to_json(),
                      file=answers, flush=True)
    except (ReferenceFailure, InputError) as exc:
        print(str(exc).splitlines()[0] if str(exc) else type(exc).__name__, file=answers)
        return 1
    return 0


if __name__ == "__main__":
    from .compilekit import lifeline

    lifeline.hold()
    sys.exit(_controls_from_stdin())
