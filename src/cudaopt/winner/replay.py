"""``cudaopt replay``: measure the winner again, beside the baseline, on this GPU.

Each performance case is measured ``repeats`` times, interleaved with the baseline (the initial
kernel) — winner, baseline, winner, baseline, ... — so both see the same clocks and temperature.
A run without an initial kernel has the first vendor as its baseline: it is timed inside the
winner's own requests, its chunks interleaved with the winner's.
Two questions are answered per case:

- *within noise of the record*: the new median lies within the recorded p10–p90 band widened
  by the spread of the new medians (or 2%, whichever is larger);
- *beats the baseline beyond noise*: the winner was faster in every interleaved pair (a sign
  test: with 5 pairs, 1 chance in 32 if the two were equally fast).

The run as a whole beats the baseline when its score (the geometric mean over the performance
cases, the quantity the search ranked by) is lower in every repeat; cases where the winner was
slower in every pair are listed as ``slower_cases``. On several GPUs each case's pairs stay on
one GPU (the cases are shared out among them), so every pair compares like with like.

The result goes to ``replay.json`` in the run directory, where the report's verdict reads it.

:func:`measure_finalists` is the same idea inside a run: the best attempt and those recorded
close to it (or measured on different GPUs) are measured again on one GPU, interleaved, before a
winner is declared: attempts measured at different moments, even of one kernel on one GPU, differ
by a few percent, so a ranking inside that spread is decided side by side. The crowning audit
(crowning.py) counts the winner's rounds.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ..crosschecks import check_launch
from ..reading import read_model_file
from ..engine.recorder import ROLES, Recorder
from ..engine.scoring import score
from ..errors import ExperimentError
from ..pool.dispatch import Evaluator
from ..wire.protocol import EvalRequest
from ..wire.results import DeviceInfo, EvalResult, TimingStats
from ..wire.signature import Signature, SignatureError, other_entry_problem, parse_signature
from ..wire.stats import geomean
from ..record.events import AttemptStarted
from ..record.rundir import RunDir
from ..record.runs import open_run, read_run_json
from ..record.crown import Finalist, Finalists
from ..record.files import Attempt, Environment, ReplayedCase, ReplayOutcome
from ..trial import Trial, recorded_trial

MATTERS = ("name", "arch", "driver_cuda_version")  # environment differences that invalidate a replay
FINALISTS = 3  # the best attempts measured again, at least, when several GPUs measured them
FINALIST_WINDOW = 0.05  # attempts recorded this close to the best are measured again beside it
FINALISTS_MAX = 6
FINALIST_REPEATS = 3
# after the first round, finalists slower than its fastest by more than this are measured no more: side
# by side, one kernel's round scores differ by about 1% (sgemm and softmax on an H200), so such a
# finalist's median would not win
FINALIST_KEEP = 0.02


def environment_differences(recorded: DeviceInfo, now: DeviceInfo, keys: tuple[str, ...] = MATTERS) -> list[str]:
    return [f"{key}: recorded {getattr(recorded, key)!r}, now {getattr(now, key)!r}"
            for key in keys if getattr(recorded, key) != getattr(now, key)]


def turn_order(count: int, repeat: int) -> list[int]:
    """Positions 0 .. count - 1, reversed on odd repeats, so that none always goes first."""
    order = list(range(count))
    return order[::-1] if repeat % 2 else order


def interleaved(evaluator: Evaluator, requests: list[EvalRequest], repeats: int,
                alternate: bool = False) -> Iterator[list[EvalResult]]:
    """Each repeat evaluates every request in turn in the same worker, so all see the same clocks
    and temperature; with ``alternate`` the order is reversed on odd repeats (A B, B A, A B, ...),
    so neither side always goes first. Results come in the requests' order."""
    for repeat in range(repeats):
        order = turn_order(len(requests), repeat) if alternate else range(len(requests))
        results = {i: evaluator.evaluate(requests[i]) for i in order}
        yield [results[i] for i in range(len(requests))]


def check_request(path: Path, request: EvalRequest) -> None:
    """A request file's signature parses and its kernel's launch resolves on each of its cases,
    within a GPU's limits (an edited request is the user's input like any other)."""
    try:
        signature = parse_signature(request.signature)
    except SignatureError as exc:
        raise ExperimentError(path, "signature", str(exc)) from None
    if not request.cases:  # nothing checked would pass
        raise ExperimentError(path, "cases", "empty: a request checks and times at least one case")
    _check_entries(path, request, signature)
    if request.kernel is None:
        if not request.vendors:
            raise ExperimentError(path, "kernel", "missing: a request without a kernel measures its vendors, and "
                                                  "names none")
        return
    defines = {k: v for k, v in request.kernel.defines.items() if isinstance(v, (int, float))}
    for i, case in enumerate(request.cases):
        launch = request.launch or case.launch
        if launch is not None:
            check_launch(path, "launch" if request.launch else f"cases[{i}].launch", launch, case, names=defines,
                         kernel=(request.kernel.source, signature))


def _check_entries(path: Path, request: EvalRequest, signature: Signature) -> None:
    """The kernel's entry and a ``.cu`` reference's are declared in their sources as the launch's
    other kernels must be; a Python reference's entry is a Python name."""
    kernel = request.kernel
    problem = kernel and other_entry_problem(kernel.source, kernel.entry, signature, "the request")
    if problem:
        raise ExperimentError(path, "kernel.entry", problem)
    reference = request.reference
    if reference is None:
        return
    if reference.kind == "cu":
        problem = other_entry_problem(reference.source, reference.entry, signature, "the reference")
    elif not reference.entry.isidentifier():
        problem = f"{reference.entry!r} is not a Python function name"
    if problem is not None:
        raise ExperimentError(path, "reference.entry", problem)


@dataclass(frozen=True)
class Target:
    """What a replay reads, read and checked once before any GPU work: one request file, or a
    run (its winner as a Trial, the environment it was measured in, its best-case-N.json)."""

    path: Path
    request: EvalRequest | None = None  # a request file's
    run: RunDir | None = None
    trial: Trial | None = None
    env: Environment | None = None
    cases: tuple[EvalRequest, ...] = ()  # best-case-N.json, in file order


def load_target(target: Path) -> Target:
    """Read everything a replay of ``target`` reads, before any GPU work (bad input: exit 2)."""
    if target.is_file():
        request = read_model_file(target, EvalRequest, "evaluation request")
        check_request(target, request)
        return Target(target, request=request)
    run = open_run(target)
    trial = recorded_trial(run, what="replay")
    env = read_run_json(run, RunDir.ENV, Environment)
    cases = []
    for path in sorted(run.path.glob(RunDir.BEST_CASES)):
        cases.append(read_run_json(run, path.name, EvalRequest))
        check_request(path, cases[-1])  # a run's requests can be edited like any request file
    return Target(target, run=run, trial=trial, env=env, cases=tuple(cases))


def replay(target: Path | Target, evaluator: Evaluator, repeats: int = 5) -> ReplayOutcome:
    """Replay a run directory (every best-case-N.json, beside the baseline) or one request file;
    ``target`` as :func:`load_target` read it (read here when a path)."""
    loaded = target if isinstance(target, Target) else load_target(target)
    if loaded.request is not None:
        return _replay_request(loaded.request, evaluator)
    run, trial = loaded.run, loaded.trial
    experiment = trial.experiment
    recorded = {c.name: c.timing for c in trial.attempt.cases if c.timing}
    differences = environment_differences(loaded.env.gpu, evaluator.device_info())
    baseline_source = experiment.initial_kernel_path.read_text() if experiment.initial_kernel_path else None
    width = len(evaluator.gpus())
    requests, pins, plan = [], [], []  # plan: each case with the positions of its requests
    for j, request in enumerate(loaded.cases):
        (case,) = request.cases
        if case.role != "performance":
            plan.append((case, [len(requests)], 1))
            requests.append(request)
            pins.append(j % width)
            continue
        sides = [request]
        if baseline_source is not None:  # else the first vendor, timed beside the winner in its own request
            baseline = experiment.request(baseline_source, request_id=f"replay-baseline-{case.name}")
            baseline.cases = [case]
            sides.append(baseline)
        step = len(sides)
        plan.append((case, list(range(len(requests), len(requests) + step * repeats, step)), step))
        requests += sides * repeats  # winner, baseline, winner, ... on one GPU
        pins += [j % width] * (step * repeats)
    measured = evaluator.evaluate_all(requests, pins=pins)
    cases, failures = [], []
    for case, positions, step in plan:
        gpu = measured[positions[0]].gpu
        if case.role != "performance":
            result = measured[positions[0]].result
            if not result.ok:
                failures.append(f"{case.name}: {result.status}: {result.reason}")
            cases.append(ReplayedCase(name=case.name, role=case.role, status=result.status, gpu=gpu))
            continue
        winner_us, baseline_us, vendor_us = [], [], []
        status = "ok"
        for i in positions:
            mine = measured[i].result
            if not mine.ok:
                status = mine.status
                failures.append(f"{case.name}: {mine.status}: {mine.reason}")
                break
            found = mine.find(case.name)
            winner_us.append(found.median_us if found else None)
            vendor_us.append(found.vendor_median_us(0) if found else None)
            if step == 1:
                baseline_us.append(vendor_us[-1])
            else:
                other = measured[i + 1].result.find(case.name)
                baseline_us.append(other.median_us if other else None)
        compared = _compare(case.name, status, recorded.get(case.name), winner_us, baseline_us, vendor_us)
        compared.gpu = gpu
        cases.append(compared)
    timed = [c for c in cases if c.role == "performance"]
    outcome = ReplayOutcome(
        passed=not failures and not differences,
        environment_differences=differences,
        failures=failures,
        beats_baseline=_score_beats(timed, repeats),
        slower_cases=[c.name for c in timed if c.winner_medians_us and all(
            w > b for w, b in zip(c.winner_medians_us, c.baseline_medians_us, strict=True))],
        repeats=repeats,
        cases=cases,
    )
    run.write_model(RunDir.REPLAY, outcome)
    run.log(f"replay: {'passed' if outcome.passed else 'failed'}, beats baseline: {outcome.beats_baseline}")
    return outcome


def _score_beats(timed: list[ReplayedCase], repeats: int) -> bool:
    """The winner's geomean over the timed cases is below the baseline's in every repeat."""
    if not timed or any(c.status != "ok" or len(c.winner_medians_us) != repeats
                        or None in c.winner_medians_us + c.baseline_medians_us for c in timed):
        return False

    def score(side: str, r: int) -> float:
        return geomean([getattr(c, side)[r] for c in timed])

    return all(score("winner_medians_us", r) < score("baseline_medians_us", r) for r in range(repeats))


def _compare(name: str, status: str, recorded: TimingStats | None, winner_us: list, baseline_us: list,
             vendor_us: list) -> ReplayedCase:
    pairs = [(w, b) for w, b in zip(winner_us, baseline_us, strict=True) if w and b]
    vendor_pairs = [(w, v) for w, v in zip(winner_us, vendor_us, strict=True) if w and v]
    now = statistics.median(w for w, _ in pairs) if pairs else None
    within = None
    if recorded and now:
        spread = (max(w for w, _ in pairs) - min(w for w, _ in pairs)) / now if len(pairs) > 1 else 0.0
        slack = max(spread, 0.02) * recorded.median_us
        within = recorded.p10_us - slack <= now <= recorded.p90_us + slack
    return ReplayedCase(
        name=name, role="performance", status=status,
        recorded_us=recorded.median_us if recorded else None,
        now_us=now, winner_medians_us=winner_us, baseline_medians_us=baseline_us,
        within_noise=within,
        speedup_vs_baseline=statistics.median(b / w for w, b in pairs) if pairs else None,
        vendor_medians_us=vendor_us,
        speedup_vs_vendor=statistics.median(v / w for w, v in vendor_pairs) if vendor_pairs else None,
        beats_baseline=bool(pairs) and status == "ok" and all(w < b for w, b in pairs),
    )


def _replay_request(request: EvalRequest, evaluator: Evaluator) -> ReplayOutcome:
    result = evaluator.evaluate(request)
    return ReplayOutcome(
        passed=result.ok,
        failures=[] if result.ok else [f"{result.status}: {result.reason}"],
        cases=[ReplayedCase(name=c.name, role=c.role, status=c.status,
                            now_us=c.timing.median_us if c.timing else None,
                            vendor_us=c.vendor_median_us(0)) for c in result.cases],
    )


@dataclass(frozen=True)
class Rounds:
    """The finalists' measurement and each finalist's results, in repeat order (what the crowning
    audit counts of the one it audits)."""

    finalists: Finalists
    results: dict[int, list[EvalResult]]


def measure_finalists(recorder: Recorder, count: int = FINALISTS, repeats: int = FINALIST_REPEATS) -> Rounds | None:
    """The run's best attempts measured again on one GPU, interleaved, ``repeats`` times (the order
    reversed on odd repeats), before a winner is declared; None when no attempt has a score. The
    finalists are every attempt whose recorded score is within ``FINALIST_WINDOW`` of the best (one
    kernel measured at two moments on one GPU differs by that much), and at least the ``count`` best
    when several GPUs measured those; at most ``FINALISTS_MAX``; the best alone is measured again
    too (its rounds count toward its crowning audit). Each round evaluates the correctness and
    performance cases, as every attempt was: nothing tells a round from the evaluation that made it a
    finalist. After the first round, a finalist slower than that round's fastest by more than
    ``FINALIST_KEEP`` is dropped: measured no more, it cannot win. The winner is the fastest median
    score of those left; a finalist that fails now cannot win."""
    rec = recorder
    scored = sorted((a for a in rec.attempts if a.score_us is not None and a.id not in rec.disqualified
                     and rec.comparable(a)), key=lambda a: (a.score_us, a.id))
    if not scored:
        return None
    close = [a for a in scored if a.score_us <= scored[0].score_us * (1 + FINALIST_WINDOW)]
    wanted = len(close)
    places = {(a.gpu.host, a.gpu.pci_bus_id or a.gpu.index) if a.gpu else None for a in scored[:count]}  # cached: no index
    if len(places) > 1:  # several GPUs measured the best: each GPU's own speed is in doubt too
        wanted = max(wanted, count)
    finalists = scored[:min(wanted, FINALISTS_MAX)]
    timeouts = rec.timeouts()

    def on_start(attempt: Attempt, gpu) -> None:
        rec.on_progress(AttemptStarted(id=attempt.id, what=f"finalist #{attempt.id} again on {gpu.label}"))

    started = time.monotonic()
    results: dict[int, list[EvalResult]] = {a.id: [] for a in finalists}  # in repeat order
    alive, gpu = list(finalists), None
    for r in range(repeats):
        if not alive:
            break
        order = [alive[n] for n in turn_order(len(alive), r)]
        requests = [rec.trial.variant(rec.source(a), a.launch, a.defines).request(
                        roles=ROLES, request_id=f"finalist-{a.id}-{r}", timeouts=timeouts) for a in order]
        measured = rec.evaluator.evaluate_all(requests, pins=[0] * len(requests),
                                              on_start=lambda i, g, order=order: on_start(order[i], g))
        gpu = gpu or measured[0].gpu
        for attempt, m in zip(order, measured, strict=True):
            results[attempt.id].append(m.result)
        alive = [a for a in alive if all(x.ok for x in results[a.id])]
        if r == 0 and alive:
            first = {a.id: score(results[a.id][0].cases) for a in alive}
            alive = [a for a in alive if first[a.id] <= min(first.values()) * (1 + FINALIST_KEEP)]
    seconds = round(time.monotonic() - started, 3)
    entries = []
    for attempt in finalists:
        mine = results[attempt.id]
        failed = next((x for x in mine if not x.ok), None)
        scores = [score(x.cases) if x.ok else None for x in mine]
        entries.append(Finalist(attempt=attempt.id, recorded_score_us=attempt.score_us, recorded_gpu=attempt.gpu,
                                scores_us=scores, score_us=None if failed else statistics.median(scores),
                                status=failed.status if failed else "ok", reason=failed.reason if failed else "",
                                dropped=failed is None and attempt not in alive))
    qualified = [e for e in entries if e.score_us is not None and not e.dropped]
    won = min(qualified, key=lambda e: (e.score_us, e.attempt)).attempt if qualified else None
    return Rounds(Finalists(gpu=gpu, repeats=repeats, finalists=entries, winner=won, seconds=seconds), results)
