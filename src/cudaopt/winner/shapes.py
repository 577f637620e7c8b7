"""Shapes beyond the benchmark: timed holdout cases and shape sweeps, winner beside baseline and vendor.

A speed-up is claimed for the shapes it was measured on. ``cudaopt verify`` also times the
holdout cases that declare their work (``flops``/``bytes``) or say ``"timed": true``, and with
``--shapes FILE`` every shape of a sweep, each made from a template case of the experiment with
other scalars. On each shape the winner (its vendor baseline riding in the same request, chunks
interleaved) and the baseline (the initial kernel) are measured in turn, ``repeats`` times.

A shape *regresses* when the winner is slower than the baseline in every repeat by more than a
margin: the larger of 2% and the measured spread (half the p10–p90 band of either side, relative
to its median). One slower repeat is noise; slower every time, beyond the spread, is not.
"""

from __future__ import annotations

import itertools
import math
import statistics
from collections.abc import Callable
from pathlib import Path

from pydantic import Field, ValidationError, model_validator

from ..crosschecks import check_case
from ..reading import read_json_file
from ..errors import ExperimentError, validation_message
from ..pool.dispatch import Evaluator
from ..experiment import Experiment
from ..wire.protocol import CaseSpec, EvalRequest, WireModel, TimingProtocol
from ..wire.results import CaseResult, TimingStats
from ..record.files import TimedCase

MIN_MARGIN = 0.02
MAX_SHAPES = 512  # a sweep checks and times every shape: a larger grid is refused before it is built
# a sweep's protocol: fewer launches per shape, correctness on one input set (the timed launches'
# hidden checks still run on fresh inputs)
SWEEP_PROTOCOL = {"warmup": 5, "iterations": 30, "input_sets": 1, "checked_launches": 2}

Scalars = dict[str, int | float]


class ShapesFile(WireModel):
    """``--shapes FILE``: scalar sets, or a grid (every combination), on a template case."""

    template: str | None = None  # a case of the experiment (default: its first performance case)
    shapes: list[Scalars] | dict[str, list[int | float]] = Field(min_length=1)

    @model_validator(mode="before")
    @classmethod
    def _bare(cls, data):
        if isinstance(data, list):
            return {"shapes": data}
        if isinstance(data, dict) and "shapes" not in data and "template" not in data:
            return {"shapes": data}  # a bare grid
        return data

    def count(self) -> int:
        """How many shapes, counted before any is built (a grid is the product of its lists)."""
        if isinstance(self.shapes, list):
            return len(self.shapes)
        return math.prod(len(v) for v in self.shapes.values())

    def scalar_sets(self) -> list[Scalars]:
        if isinstance(self.shapes, list):
            return self.shapes
        names = list(self.shapes)
        return [dict(zip(names, values, strict=True)) for values in itertools.product(*self.shapes.values())]


def shape_name(scalars: Scalars) -> str:
    return ",".join(f"{k}={v}" for k, v in scalars.items())


def load_shapes(path: Path, experiment: Experiment) -> list[CaseSpec]:
    """The sweep's cases: the template with each scalar set, checked like any input case."""
    try:
        spec = ShapesFile.model_validate(read_json_file(path, "shapes file"), strict=True)
    except ValidationError as exc:
        raise ExperimentError(path, *validation_message(exc, ShapesFile)) from None
    cases = experiment.case_specs
    if spec.template is None:
        template = next((c for c in cases if c.role == "performance"), None)
        if template is None:
            raise ExperimentError(path, "template", "the experiment has no performance case to use as a template")
    else:
        template = next((c for c in cases if c.name == spec.template), None)
        if template is None:
            raise ExperimentError(path, "template", f"no case named {spec.template!r} in the experiment "
                                                    f"({', '.join(c.name for c in cases)})")
    count = spec.count()
    if count > MAX_SHAPES:
        sizes = " x ".join(str(len(v)) for v in spec.shapes.values()) if isinstance(spec.shapes, dict) else ""
        raise ExperimentError(path, "shapes", f"{count:,} shapes{f' ({sizes})' if sizes else ''}, above the limit of "
                                              f"{MAX_SHAPES}: each is checked and timed; list fewer values")
    known = set(template.scalars)
    out = []
    for i, scalars in enumerate(spec.scalar_sets()):
        unknown = sorted(set(scalars) - known)
        if unknown:
            raise ExperimentError(path, f"shapes[{i}]", f"{', '.join(unknown)}: not a scalar of case "
                                                        f"{template.name!r} ({', '.join(sorted(known))})")
        case = template.model_copy(update={"name": shape_name(scalars), "role": "holdout",
                                           "scalars": {**template.scalars, **scalars}, "timed": True,
                                           "seed": template.seed + 1000 + i})
        check_case(path, f"shapes[{i}]", case, template.launch, experiment.signature)
        out.append(case)
    names = [c.name for c in out]
    if len(set(names)) != len(names):
        raise ExperimentError(path, "shapes", "a shape is listed twice")
    return out


def sweep_protocol(protocol: TimingProtocol) -> TimingProtocol:
    """The experiment's protocol with a sweep's fewer launches (never more than it asks for)."""
    changes = {k: min(v, getattr(protocol, k)) for k, v in SWEEP_PROTOCOL.items()}
    return protocol.model_copy(update=changes)


def _spread(timing: TimingStats | None) -> float:
    if timing is None or timing.median_us <= 0:
        return 0.0
    return (timing.p90_us - timing.p10_us) / (2 * timing.median_us)


def time_shapes(evaluator: Evaluator, cases: list[CaseSpec], origin: str,
                winner: Callable[[CaseSpec], EvalRequest], baseline: Callable[[CaseSpec], EvalRequest] | None,
                repeats: int, on_step: Callable[[str], None] = lambda name: None,
                single: Callable[[CaseSpec], EvalRequest | None] | None = None) -> list[TimedCase]:
    """Each case: the winner's request (carrying the vendor), the baseline's and, with a dispatch
    table, the single winner's where it differs from the shape's class, in turn, ``repeats`` times,
    all on one GPU (the cases shared out among the GPUs: one timed kernel per GPU at a time)."""
    width = max(1, len(evaluator.gpus()))
    requests, pins, owner, ends, layout = [], [], [], set(), []
    for i, case in enumerate(cases):
        extra = single(case) if single else None
        sides = [winner(case)] + ([baseline(case)] if baseline else []) + ([extra] if extra is not None else [])
        layout.append(len(sides))
        for _ in range(repeats):
            requests += sides
            pins += [i % width] * len(sides)
            owner += [i] * len(sides)
            ends.add(len(requests) - 1)

    def done(index: int, measured) -> None:
        if index in ends:
            on_step(cases[owner[index]].name)

    measured = evaluator.evaluate_all(requests, pins=pins, on_done=done)
    out, start = [], 0
    for case, count in zip(cases, layout, strict=True):
        mine = [measured[start + r * count:start + (r + 1) * count] for r in range(repeats)]
        start += repeats * count
        results = [(_case(m[0], case.name), _case(m[1], case.name) if baseline else None) for m in mine]
        singles = [_case(m[-1], case.name) for m in mine] if count > 1 + bool(baseline) else None
        out.append(judge(case, origin, results, singles))
    return out


def _case(measured, name: str) -> CaseResult | None:
    return measured.result.find(name) if measured is not None else None


def judge(case: CaseSpec, origin: str, results: list[tuple[CaseResult | None, CaseResult | None]],
          singles: list[CaseResult | None] | None = None) -> TimedCase:
    """Speed-ups and the regression verdict from the repeats of one shape (and, with ``singles``,
    the single winner's times beside a dispatch table's choice)."""
    failed = next((m for m, _ in results if m is None or m.median_us is None), False)
    timed = TimedCase(name=case.name, origin=origin, scalars=dict(case.scalars), status="ok")
    if failed is not False:
        if failed is None or failed.status == "ok":
            timed.status, timed.reason = "internal_error", "the worker returned no timing for this case"
        else:
            timed.status, timed.reason = failed.status, failed.reason
        return timed
    timed.winner_medians_us = [m.median_us for m, _ in results]
    timed.baseline_medians_us = [t.median_us if t else None for _, t in results]
    timed.vendor_medians_us = [m.vendor_median_us(0) for m, _ in results]
    vendor_failed = next((m.vendors[0] for m, _ in results if m.vendors and m.vendors[0].status != "ok"), None)
    if vendor_failed is not None:  # say why a vendor figure is missing (it never fails the winner)
        timed.vendor_status, timed.vendor_reason = vendor_failed.status, vendor_failed.reason
    timed.winner_us = statistics.median(timed.winner_medians_us)
    pairs = [(m, t) for m, t in results if t is not None and t.median_us]
    vendor = [v for v in timed.vendor_medians_us if v]
    timed.vendor_us = statistics.median(vendor) if vendor else None
    ratios = [v / w for w, v in zip(timed.winner_medians_us, timed.vendor_medians_us, strict=True) if v]
    timed.speedup_vs_vendor = statistics.median(ratios) if ratios else None
    if pairs:
        timed.baseline_us = statistics.median(t.median_us for _, t in pairs)
        timed.speedup_vs_baseline = statistics.median(t.median_us / m.median_us for m, t in pairs)
        timed.margin = round(max(MIN_MARGIN, *(max(_spread(m.timing), _spread(t.timing)) for m, t in pairs)), 4)
        timed.regression = len(pairs) == len(results) and all(
            m.median_us > t.median_us * (1 + timed.margin) for m, t in pairs)
    if singles:
        timed.single_medians_us = [s.median_us if s else None for s in singles]
        paired = [(m.median_us, s) for (m, _), s in zip(results, timed.single_medians_us, strict=True) if s]
        timed.single_us = statistics.median(s for _, s in paired) if paired else None
        timed.speedup_vs_single = statistics.median(s / w for w, s in paired) if paired else None
    return timed
