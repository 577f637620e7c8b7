"""Imported cases that discriminate: negative controls (worker/controls.py) run at import.

KernelBench's shapes are kept (so timings stay comparable), but its own draws and tolerance can make
a check that cannot fail: an activation fed only values where it is the identity accepts a copy of
its input; outputs far below the absolute tolerance (1e-2) accept zeros; a mean over millions of
draws accepts the answer for other inputs. Each case is run on the CPU (itself, or with its batch
sizes halved until it fits: rows of a batch are independent, so the outputs' scale and what a
trivial output does to them stay the same), and while a trivial output passes:

1. a copy of a forward input passes: that input is drawn from a centred normal distribution wide
   enough to leave the identity region (std max(1, its scale), then ten times that);
2. zeros, ones, a constant or a stale answer pass: the absolute tolerance follows the outputs'
   scale, ``atol = min(atol, ATOL_SCALE * mean |output|)``;
3. still: rtol and atol are divided by ``TIGHTEN`` down to a floor the output's type can honour
   (and, on a case shrunk for the CPU, by the square root of how much it was shrunk: a mean over
   more draws varies less between input sets).

A case that still accepts one is written with ``trivial_ok`` saying so, and the import says it. One
more correctness case, at the smallest sizes, draws every floating forward input from a wide centred
normal (negative values, large magnitudes) to exercise every branch of the operation. What
KernelBench itself uses is recorded beside (config.KernelBenchOrigin).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np

from ..config import KernelBenchCase, KernelBenchOrigin
from ..cpu_controls import batch_shrunk, elements, reference_sets
from ..worker.controls import negative_controls
from ..wire.protocol import CaseSpec, InitSpec, InputSpec
from ..wire.signature import Signature

ATOL_SCALE = 1e-2  # KernelBench's atol for outputs of magnitude 1, scaled with the outputs
TIGHTEN = 4.0
# the tightest rtol an honest kernel can be held to (a long float32 sum is good to about 1e-6)
RTOL_FLOOR = {"float64": 1e-8, "float32": 2e-5, "float16": 1e-3, "bfloat16": 8e-3}
WIDE = 10.0  # the branches case: forward inputs ~ N(0, WIDE * max(1, their scale))


@dataclass
class Discriminating:
    cases: list[CaseSpec]
    origin: KernelBenchOrigin
    notes: list[str] = field(default_factory=list)


def discriminate(problem: str, signature: Signature, cases: list[CaseSpec], reference: Callable,
                 forward_inputs: list[str], rtol: float, atol: float) -> Discriminating:
    """The cases made to discriminate, the branches case added after the correctness cases."""
    floats = [a.name for a in signature.inputs if a.name in forward_inputs and a.dtype in RTOL_FLOOR]
    done = Discriminating(cases=[], origin=KernelBenchOrigin(problem=problem))
    branches = _branches(cases, floats)
    at = next((i for i, c in enumerate(cases) if c.role != "correctness"), len(cases))
    for case in [*cases[:at], *([branches] if branches else []), *cases[at:]]:
        record = KernelBenchCase(rtol=rtol, atol=atol, inputs={n: s.init for n, s in case.inputs.items()},
                                 added=case is branches)
        fixed = _Fixer(signature, reference, floats, done.notes, record).fix(case)
        if fixed is None:
            continue
        done.cases.append(fixed)
        done.origin.cases[fixed.name] = record
    return done


class _Fixer:
    def __init__(self, signature: Signature, reference: Callable, floats: list[str], notes: list[str],
                 record: KernelBenchCase):
        self.signature, self.reference, self.floats, self.notes, self.record = signature, reference, floats, notes, \
            record

    def fix(self, case: CaseSpec) -> CaseSpec | None:
        scalars = batch_shrunk(case)
        if scalars is None:
            self.notes.append(f"{case.name}: too large for the CPU, even with its batch shrunk: its negative controls "
                              "run on the GPU at evaluation")
            return case
        smaller = ", ".join(f"{n}={v}" for n, v in scalars.items() if v != case.scalars[n])
        shrunk = f" (on the CPU at {smaller})" if smaller else ""
        sets = self._sets(case, scalars)
        for widening in (1.0, WIDE):
            if sets is None:
                return None
            controls = negative_controls(case.model_copy(update={"scalars": scalars}), self.signature, sets)
            copied = [n for n in self.floats if any(a.trivial == f"a copy of input {n}" for a in controls.accepted)]
            if not copied or self.record.added:
                break
            inputs = dict(case.inputs)
            for name in copied:
                old = inputs[name].init
                new = wide(self.record.inputs[name], widening)
                inputs[name] = InputSpec(shape=inputs[name].shape, init=new)
                self.record.changes.append(f"input {name} drawn from {shown(new)} instead of {shown(old)}: a copy of "
                                           f"{name} passed its check{shrunk}")
            case = case.model_copy(update={"inputs": inputs})
            sets = self._sets(case, scalars)
        if sets is None:
            return None
        return self._tolerances(case, scalars, sets, shrunk)

    def _sets(self, case: CaseSpec, scalars: dict):
        sets = reference_sets(self.reference, "torch", self.signature, case.model_copy(update={"scalars": scalars}))
        if self.record.added and not all(np.isfinite(v).all() for s in sets for v in s.answers.values()):
            self.notes.append(f"{case.name}: not added: the reference gives NaN or infinity for inputs this wide")
            return None
        return sets

    def _tolerances(self, case: CaseSpec, scalars: dict, sets, shrunk: str) -> CaseSpec:
        outputs = dict(case.outputs)
        controls = negative_controls(case.model_copy(update={"scalars": scalars}), self.signature, sets)
        for name in {a.output for a in controls.accepted}:
            typical = float(np.mean([np.abs(v[np.isfinite(v)]).mean() for s in sets
                                     for v in [s.answers[name]] if np.isfinite(v).any()] or [0.0]))
            scaled = two_digits(ATOL_SCALE * typical)
            if scaled < outputs[name].atol:
                self.record.changes.append(f"output {name}: atol {scaled:g} instead of {outputs[name].atol:g}, "
                                           f"{ATOL_SCALE:g} of its typical magnitude {typical:.2g}{shrunk}")
                outputs[name] = outputs[name].model_copy(update={"atol": scaled})
        dtypes = {a.name: a.dtype for a in self.signature.outputs}
        tightened: dict[str, str] = {}  # output -> the trivial output that passed before
        while True:
            case = case.model_copy(update={"outputs": outputs})
            controls = negative_controls(case.model_copy(update={"scalars": scalars}), self.signature, sets)
            names = {a.output for a in controls.accepted}
            if not names or any(outputs[n].rtol / TIGHTEN < RTOL_FLOOR.get(dtypes[n], 1.0) for n in names):
                break  # an integer output is not made stricter: its tolerance says what exact means
            for name in names:
                spec = outputs[name]
                tightened.setdefault(name, next(a.trivial for a in controls.accepted if a.output == name))
                outputs[name] = spec.model_copy(update={"rtol": two_digits(spec.rtol / TIGHTEN),
                                                        "atol": two_digits(spec.atol / TIGHTEN)})
        if tightened and shrunk:  # a trivial output that nearly passed at the CPU's sizes may pass at the case's own
            margin = np.sqrt(elements(case) / elements(case.model_copy(update={"scalars": scalars})))
            for name in tightened:
                spec, factor = outputs[name], min(margin, max(1.0, outputs[name].rtol / RTOL_FLOOR[dtypes[name]]))
                outputs[name] = spec.model_copy(update={"rtol": two_digits(spec.rtol / factor),
                                                        "atol": two_digits(spec.atol / factor)})
            case = case.model_copy(update={"outputs": outputs})
        for name, trivial in tightened.items():
            self.record.changes.append(f"output {name}: rtol {outputs[name].rtol:.3g}, atol {outputs[name].atol:.3g}: "
                                       f"{trivial} passed with larger ones{shrunk}")
        if controls.accepted:
            first = controls.accepted[0]
            reason = (f"imported from KernelBench: output {first.output} accepts {first.trivial} even at rtol "
                      f"{outputs[first.output].rtol:.3g} (the tightest its type allows); a kernel that writes it "
                      "cannot be told from a correct one on this case")
            self.notes.append(f"warning: {case.name}: {reason}")
            case = case.model_copy(update={"trivial_ok": reason})
        return case


def two_digits(value: float) -> float:
    """Two significant digits, rounded down (a tolerance is never loosened by its rounding)."""
    if value <= 0:
        return 0.0
    scale = 10.0 ** (np.floor(np.log10(value)) - 1)
    return float(f"{np.floor(value / scale) * scale:.2g}")


def wide(init: InitSpec, factor: float) -> InitSpec:
    """A centred normal distribution at least as wide as ``init`` (times ``factor``)."""
    scale = max(abs(init.low), abs(init.high)) if init.dist in ("uniform", "integers") else abs(init.mean) + init.std
    return InitSpec(dist="normal", mean=0.0, std=float(f"{max(1.0, scale) * factor:.2g}"), vary=init.vary)


def shown(init: InitSpec) -> str:
    if init.dist == "normal":
        return f"normal({init.mean:g}, {init.std:g})"
    return f"{init.dist}({init.low:g}, {init.high:g})"


def _branches(cases: list[CaseSpec], floats: list[str]) -> CaseSpec | None:
    """A correctness case at the smallest sizes with every floating forward input drawn wide."""
    if not floats or not cases:
        return None
    base = min([c for c in cases if c.role == "correctness"] or cases, key=elements)
    inputs = {n: InputSpec(shape=s.shape, init=wide(s.init, WIDE)) if n in floats else s
              for n, s in base.inputs.items()}
    shape = "x".join(str(base.scalars[n]) for n in base.scalars if n in {d for s in base.inputs.values()
                                                                        for d in s.shape})
    return base.model_copy(update={"name": f"branches-{shape}" if shape else "branches", "role": "correctness",
                                   "seed": base.seed + 30, "inputs": inputs})
