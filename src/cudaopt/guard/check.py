"""``cudaopt guard check``: a kernel against its guard file — correct on every case, and no slower.

Every case of the experiment, holdout included, is checked with fresh seeds (winner/verify.py's
``fresh_cases``). Each performance case is then timed ``repeats`` times: in A/B mode beside the
old kernel, interleaved in the same worker with the order alternating (winner/replay.py's
``interleaved``), so machine noise cancels in each pair; otherwise alone, against the recorded
figures, which only holds on the GPU model and driver they were recorded on. stats.py decides.
"""

from __future__ import annotations

import secrets
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..pool.dispatch import Evaluator
from ..wire.protocol import CaseSpec, TimingProtocol
from ..wire.results import CaseResult, EvalResult
from ..wire.stats import geomean
from ..winner.replay import MATTERS, environment_differences, interleaved
from ..winner.verify import fresh_cases
from .files import GuardCheck, GuardedCase
from .load import Guarded
from .stats import Interval, paired, unpaired, verdict

GPU_MATTERS = (*MATTERS, "driver_version")  # what must match for recorded figures to compare
QUICK_REPEATS = 4
QUICK_LAUNCHES = {"warmup": 5, "iterations": 30}  # A/B only: recorded figures keep their protocol
WORDS = {"regressed": "slower beyond the limit", "improved": "faster beyond the limit", "within": "within the limit",
         "inconclusive": "inconclusive: a slowdown beyond the limit is not ruled out (more --repeats would tell)"}


@dataclass(frozen=True)
class Settings:
    max_slowdown: float = 0.03
    confidence: float = 0.95
    repeats: int | None = None  # None: the guard file's (QUICK_REPEATS with quick)
    quick: bool = False
    other_gpu: Literal["fail", "skip"] = "fail"  # recorded figures from another GPU or driver
    seed: int | None = None  # None: a fresh random one


def check(guarded: Guarded, evaluator: Evaluator, settings: Settings,
          on_progress: Callable[[str], None] = lambda text: None) -> GuardCheck:
    start = time.monotonic()
    experiment, baseline = guarded.experiment, guarded.baseline
    seed = secrets.randbits(31) if settings.seed is None else settings.seed
    mode = "ab" if guarded.against else "recorded"
    protocol, repeats = _protocol(baseline.protocol, baseline.repeats, settings, mode)
    gpu = evaluator.device_info()
    differences = environment_differences(baseline.gpu, gpu, GPU_MATTERS)
    cases = fresh_cases(experiment.cases(), seed)
    on_progress(f"{guarded.path.name}: checking {len(cases)} cases")
    result = evaluator.evaluate(guarded.kernel.request(cases, protocol, timed=False))
    recorded = {c.name: c.medians_us for c in baseline.cases}
    out, series = [], {}
    for case in cases:
        found = result.find(case.name)
        if found is None or found.status != "ok":
            out.append(_incorrect(case, found, result))
        elif case.role != "performance":
            out.append(_passed(case, found, "checked"))
        elif mode == "recorded" and differences:
            skip = settings.other_gpu == "skip"
            out.append(_passed(case, found, "checked; timing not compared: recorded on another GPU or driver",
                               verdict="skipped" if skip else "other_gpu"))
        else:
            mine, theirs, failure = _time(guarded, case, protocol, repeats, evaluator, on_progress)
            if failure is not None:
                out.append(failure)
                continue
            theirs = theirs if mode == "ab" else recorded[case.name]
            out.append(_compared(case, found, mode, mine, theirs, settings, guarded.against_label))
            series[case.name] = (mine, theirs)
    score = _score(mode, series, [c.name for c in cases if c.role == "performance"], settings.confidence)
    notes = list(guarded.notes)
    if guarded.source_changed:
        notes.append(f"{guarded.kernel.label} changed since the guard was recorded")
    return GuardCheck(
        file=str(guarded.path), kernel=guarded.kernel.label, source_changed=guarded.source_changed, mode=mode,
        against=guarded.against_label, seed=seed, repeats=repeats, protocol=protocol,
        max_slowdown=settings.max_slowdown, confidence=settings.confidence,
        method=("paired t on log time ratios" if mode == "ab" else "Welch t on log medians"),
        gpu=gpu, environment_differences=differences, notes=notes, cases=out,
        score_ratio=score.ratio if score else None, score_low=score.low if score else None,
        score_high=score.high if score else None,
        passed=not any(c.failed for c in out), wall_s=round(time.monotonic() - start, 3),
    )


def _protocol(recorded: TimingProtocol, recorded_repeats: int, settings: Settings,
              mode: str) -> tuple[TimingProtocol, int]:
    """The recorded protocol and repeats; with quick, fewer repeats (and in A/B, fewer launches)."""
    if not settings.quick:
        return recorded.model_copy(), settings.repeats or recorded_repeats
    fewer = {k: min(v, getattr(recorded, k)) for k, v in QUICK_LAUNCHES.items()} if mode == "ab" else {}
    if fewer:
        fewer["checked_launches"] = min(recorded.checked_launches, fewer["iterations"])
    return TimingProtocol(**{**recorded.model_dump(), **fewer}), settings.repeats or QUICK_REPEATS


def _time(guarded: Guarded, case: CaseSpec, protocol: TimingProtocol, repeats: int, evaluator: Evaluator,
          on_progress: Callable[[str], None]) -> tuple[list[float], list[float], GuardedCase | None]:
    """The kernel's medians and the old kernel's (A/B, interleaved), or the kernel's alone; and the
    case's line when a side failed."""
    sides = [guarded.kernel] + ([guarded.against] if guarded.against else [])
    requests = [kernel.request([case], protocol, timed=True) for kernel in sides]
    mine: list[float] = []
    theirs: list[float] = []
    for repeat, results in enumerate(interleaved(evaluator, requests, repeats, alternate=True)):
        on_progress(f"{guarded.path.name}: {case.name}: {'pair' if guarded.against else 'repeat'} "
                    f"{repeat + 1}/{repeats}")
        now = results[0].find(case.name)
        if now is None or now.median_us is None:
            return mine, theirs, _incorrect(case, now, results[0])
        mine.append(now.median_us)
        if guarded.against:
            old = results[1].find(case.name)
            if old is None or old.median_us is None:
                status = old.status if old else results[1].status
                reason = " ".join((old.reason if old else results[1].reason).split())
                return mine, theirs, GuardedCase(
                    name=case.name, role=case.role, status=now.status, verdict="error",
                    message=f"the old kernel ({guarded.against.label}) failed: {status}: {reason}; nothing to "
                            "compare with")
            theirs.append(old.median_us)
    return mine, theirs, None


def _interval(mode: str, mine: list[float], theirs: list[float], confidence: float) -> Interval:
    return paired(mine, theirs, confidence) if mode == "ab" else unpaired(mine, theirs, confidence)


def _score(mode: str, series: dict, timed: list[str], confidence: float) -> Interval | None:
    """The geomean over the timed cases, repeat by repeat (when every timed case was compared)."""
    if not timed or set(series) != set(timed):
        return None
    sides = [[geomean([series[name][side][r] for name in timed])
              for r in range(min(len(series[name][side]) for name in timed))] for side in (0, 1)]
    return _interval(mode, *sides, confidence)


def _errors(found: CaseResult | None) -> dict:
    checks = found.checks if found else []
    return {"max_abs_error": max((k.max_abs_error for k in checks), default=None),
            "max_rel_error": max((k.max_rel_error for k in checks), default=None)}


def _passed(case: CaseSpec, found: CaseResult, message: str, verdict: str = "passed") -> GuardedCase:
    errors = _errors(found)
    sets = len({k.input_set for k in found.checks})
    figures = ", ".join(f"{k.replace('_', ' ')} {v:.3g}" for k, v in errors.items() if v is not None)
    return GuardedCase(name=case.name, role=case.role, status=found.status, verdict=verdict,
                       message=f"{message} ({sets} input sets{', ' + figures if figures else ''})", **errors)


def _incorrect(case: CaseSpec, found: CaseResult | None, result: EvalResult) -> GuardedCase:
    status, reason = (found.status, found.reason) if found else (result.status, result.reason)
    return GuardedCase(name=case.name, role=case.role, status=status, verdict="incorrect",
                       message=f"{status}: {' '.join(reason.split())}", **_errors(found))


def _compared(case: CaseSpec, found: CaseResult, mode: str, mine: list[float], theirs: list[float],
              settings: Settings, against: str) -> GuardedCase:
    interval = _interval(mode, mine, theirs, settings.confidence)
    decided = verdict(interval, settings.max_slowdown)
    change = lambda r: f"{(r - 1) * 100:+.1f}%"
    message = (f"{WORDS[decided]}: time {change(interval.ratio)} ({change(interval.low)} to {change(interval.high)}, "
               f"{settings.confidence:.0%} interval; limit +{settings.max_slowdown:.1%}): "
               f"{statistics.median(mine):.2f} µs now, {statistics.median(theirs):.2f} µs in {against}, "
               f"{interval.n} {'pairs' if mode == 'ab' else 'repeats'}")
    return GuardedCase(name=case.name, role=case.role, status=found.status, verdict=decided, message=message,
                       candidate_medians_us=mine, baseline_medians_us=list(theirs), ratio=interval.ratio,
                       ratio_low=interval.low, ratio_high=interval.high, **_errors(found))
