"""Negative controls: a check that cannot fail is not a check.

For each output of a case, trivial outputs are compared with the reference's answer of each input
set under the case's own tolerances, by the element rule of compare.py: all zeros, all ones, all
NaN (a floating output), a constant learnt from another input set's answer (its median and mean, from a sample of a large
answer: an output that is nearly the same constant whatever the inputs), a copy of each input
with as many elements (as the output's type stores it), and the answer for another input set (a
stale answer). A case whose check accepts one is *non-discriminating*: a kernel that writes that
output would pass it. Unless the case says why that is acceptable (``trivial_ok``), it is refused
before any candidate is judged.

Pure NumPy, shared by the GPU worker (on the answers it holds on the device, read through
:class:`Values`, answers.py) and by ``cudaopt check`` (on the CPU, preflight.py). A trivial output
that fails on any element fails, so a sample of the elements is compared first and only a trivial
output that passes there is compared in full: the controls cost little next to the reference, and
an answer is read whole only for a trivial output that passed its sample.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Protocol

import numpy as np

from ..wire.protocol import CaseSpec
from ..wire.results import ControlOutcome, Controls
from ..wire.signature import DTYPES, Signature
from .compare import agrees
from .inputs import from_numbers, to_numbers

SAMPLE, SAMPLE_RUN = 4096, 16  # elements compared before a full comparison, in runs of 16
STATS_SAMPLE, STATS_RUN = 1 << 22, 1 << 16  # elements an answer's median and mean are learnt from


class Values(Protocol):
    """An answer's values as float64 numbers, read where they are (a host array, or the worker's
    locked device memory, answers.py): those at flat indices, or all of them. A control reads a
    sample first and all of an answer only for a trivial output that passed the sample."""

    shape: tuple[int, ...]

    def at(self, index: np.ndarray) -> np.ndarray: ...

    def all(self) -> np.ndarray: ...


class HostValues:
    """:class:`Values` of an array in host memory, as float64 only where read (an input as large
    as KernelBench's softmax is 12.9 GB in float64)."""

    def __init__(self, values: np.ndarray):
        self.flat = values.reshape(-1)
        self.shape = tuple(values.shape)

    def at(self, index: np.ndarray) -> np.ndarray:
        return np.asarray(self.flat[index], dtype=np.float64)

    def all(self) -> np.ndarray:
        return np.asarray(self.flat, dtype=np.float64)


def as_values(values: np.ndarray | Values) -> Values:
    return HostValues(values) if isinstance(values, np.ndarray) else values


def spread(n: int, count: int, run: int) -> np.ndarray:
    """Sorted flat indices of ``count`` of ``n`` elements, in runs of ``run`` contiguous ones spread
    evenly over them (all n when n <= count): few reads where the values are on a device."""
    if n <= count:
        return np.arange(n, dtype=np.int64)
    run = max(1, min(run, count))
    starts = np.linspace(0, n - run, count // run).astype(np.int64)
    index = (starts[:, None] + np.arange(run, dtype=np.int64)).reshape(-1)
    if index.size > 1 and not (np.diff(index) > 0).all():  # runs that overlap: sorted, once each
        index = np.sort(index)
        index = index[np.concatenate(([True], np.diff(index) != 0))]
    return index  # not np.unique: its hash table takes seconds on the 4 M indices of a large answer


def runs(index: np.ndarray) -> list[tuple[int, int]]:
    """``index`` as (first, end) runs of consecutive flat indices, in its order."""
    if index.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(index) != 1) + 1
    starts, ends = np.concatenate(([0], breaks)), np.concatenate((breaks, [index.size]))
    return [(int(index[a]), int(index[b - 1]) + 1) for a, b in zip(starts, ends, strict=True)]


@dataclass
class ControlSet:
    """One input set of a case: its inputs (storage layout, with their element types) and the
    reference's answer for each output (numbers: an array, or :class:`Values`)."""

    inputs: dict[str, tuple[np.ndarray, str]]
    answers: dict[str, np.ndarray | Values]


def negative_controls(case: CaseSpec, signature: Signature, sets: list[ControlSet],
                      related: set[frozenset[int]] = frozenset()) -> Controls:
    """Compare every trivial output with every answer; ``related`` pairs of input sets are not
    independent draws (the near duplicate), so neither is a stale answer for the other."""
    controls = Controls()
    found: set[tuple[str, str]] = set()
    stats: dict[tuple[int, str], list[tuple[str, float]]] = {}  # an answer's median and mean, computed once
    for s, current in enumerate(sets):
        others = [t for t in range(len(sets)) if t != s and frozenset((s, t)) not in related
                  and not _same_inputs(current, sets[t])]
        for arg in signature.outputs:
            spec = case.outputs[arg.name]
            ref = as_values(current.answers[arg.name])
            for kind, trivial, make in _trivials(arg.name, arg.dtype, ref.shape, current, sets, others, stats):
                controls.tried += 1
                if (arg.name, kind) in found:
                    continue  # one of each kind per output is enough to say why
                err = accepts(make, ref, arg.dtype, spec.rtol, spec.atol)
                if err is not None:
                    found.add((arg.name, kind))
                    controls.accepted.append(ControlOutcome(output=arg.name, trivial=trivial, input_set=s,
                                                            max_abs_error=err, rtol=spec.rtol, atol=spec.atol))
    return controls


def judge(case: CaseSpec, controls: Controls) -> str | None:
    """The one-line refusal of a non-discriminating case; None when it discriminates or its
    ``trivial_ok`` waives the controls (then recorded in ``controls.waived``)."""
    if controls.discriminating:
        return None
    if case.trivial_ok:
        controls.waived = case.trivial_ok
        return None
    return refusal(case.name, controls)


def refusal(case: str, controls: Controls) -> str:
    first = controls.accepted[0]
    more = len(controls.accepted) - 1
    return (f"case {case}: output {first.output} accepts {first.trivial} (max abs err {first.max_abs_error:.3g}, "
            f"within atol {first.atol:g} + rtol {first.rtol:g}·|ref|)" + (f", and {more} more trivial output(s)"
                                                                          if more else "")
            + "; the check cannot tell a kernel from it: change the case's inputs or tolerances, or give the case "
              "a \"trivial_ok\" reason")


def accepts(make, ref: np.ndarray | Values, dtype: str, rtol: float, atol: float) -> float | None:
    """The max abs error when the trivial output ``make(index)`` passes for ``ref`` on every
    element, else None. ``make`` gives the trivial values (numbers, as ``dtype`` stores them) at
    flat indices, or all of them for None."""
    ref = as_values(ref)
    n = int(np.prod(ref.shape, dtype=np.int64))
    if n > SAMPLE:
        index = spread(n, SAMPLE, SAMPLE_RUN)
        if not agrees(make(index), ref.at(index), rtol, atol).all():
            return None
    flat = ref.all()
    values = np.broadcast_to(make(None), flat.shape)
    if not agrees(values, flat, rtol, atol).all():
        return None
    with np.errstate(invalid="ignore", over="ignore"):
        diff = np.abs(values - flat)
    finite = diff[np.isfinite(diff)]
    return float(finite.max()) if finite.size else 0.0


def stored(values: np.ndarray, dtype: str) -> np.ndarray:
    """Values as an output of ``dtype`` would hold them (rounded into it), as float64 numbers."""
    values = np.asarray(values, dtype=np.float64)
    if not DTYPES[dtype].is_float:
        info = np.iinfo(DTYPES[dtype].numpy)
        values = np.clip(np.rint(np.nan_to_num(values)), info.min, info.max)
    with np.errstate(over="ignore", invalid="ignore"):
        return to_numbers(from_numbers(values, dtype), dtype).astype(np.float64).reshape(values.shape)


def _trivials(name: str, dtype: str, shape: tuple[int, ...], current: ControlSet, sets: list[ControlSet],
              others: list[int], stats: dict):
    """(its kind, what it is, its values at flat indices) for every trivial output of one output."""
    n = int(np.prod(shape, dtype=np.int64))
    for label, value in (("zeros", 0.0), ("ones", 1.0)):
        yield label, label, _constant(value, dtype)
    if DTYPES[dtype].is_float:  # NaN agrees with NaN: a reference that answers NaN everywhere checks nothing
        yield "nan", "all NaN", _constant(float("nan"), dtype)
    seen = {0.0, 1.0}
    for t in others:
        answer = as_values(sets[t].answers[name])
        if (t, name) not in stats:
            stats[t, name] = _learnt_constants(answer)
        for stat, value in stats[t, name]:
            value = float(stored(np.array(value), dtype))
            if value not in seen:
                seen.add(value)
                yield "constant", f"the constant {value:.6g} (the {stat} of input set {t}'s answer)", \
                    _constant(value, dtype)
        if stats[t, name]:
            yield "stale", f"the answer for input set {t}", _array(answer, dtype)
    out_is_float = DTYPES[dtype].is_float
    for arg_name, (data, in_dtype) in current.inputs.items():
        if data.size != n or (not out_is_float and DTYPES[in_dtype].is_float):
            continue
        yield f"copy {arg_name}", f"a copy of input {arg_name}", _array(HostValues(to_numbers(data, in_dtype)), dtype)


def _learnt_constants(answer: Values) -> list[tuple[str, float]]:
    """The median and mean of an answer's finite values, learnt from a sample of
    :data:`STATS_SAMPLE` elements spread over it when it is larger: any near-constant output is as
    near that constant, and a full median of KernelBench's 1.6 G-element softmax costs seconds."""
    n = int(np.prod(answer.shape, dtype=np.int64))
    flat = answer.all() if n <= STATS_SAMPLE else answer.at(spread(n, STATS_SAMPLE, STATS_RUN))
    finite = flat[np.isfinite(flat)]
    return [("median", float(np.median(finite))), ("mean", float(finite.mean()))] if finite.size else []


def _constant(value: float, dtype: str):
    held = stored(np.array(value), dtype)
    return lambda index: held


def _array(values: Values, dtype: str):
    return lambda index: stored(values.all() if index is None else values.at(index), dtype)


def _same_inputs(a: ControlSet, b: ControlSet) -> bool:
    """Two input sets with the same data (inputs that do not vary): their answers are the same."""
    return all(np.array_equal(x, b.inputs[name][0]) for name, (x, _) in a.inputs.items())
