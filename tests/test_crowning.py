"""The crowning audit (winner/crowning.py): no kernel is a run's winner before at least 11 of each
performance case's timed launches were checked since it was chosen, so one cheating on half of
one case's launches is crowned with a chance below 2^-11 per audit and 2^-10 per run. On the CPU:
the arithmetic, and a run on the fake device (tests/fake_device.py) whose fastest candidate is
such a cheat, lucky enough to pass its own evaluation and its finalists' rounds."""

from __future__ import annotations

import json
from math import comb

import numpy as np
import pytest

from cudaopt.engine.recorder import Recorder
from cudaopt.experiment import load_experiment
from cudaopt.worker.runner import Runner
from cudaopt.worker.timing import draw_plan
from cudaopt.pool.dispatch import Dispatcher, GpuRef
from cudaopt.record.files import Summary
from cudaopt.record.rundir import RunDir
from cudaopt.winner.crowning import FIRST_AUDIT, crown, escape
from cudaopt.wire.protocol import TimingProtocol
from tests.fake_device import FakeDevice
from tests.test_runner_fake_device import REFERENCE, SIGNATURE, SIZES, SOURCE, relu

PROTOCOL = TimingProtocol(warmup=2, iterations=20, chunk=10, checked_launches=3)
CHEAT = SOURCE + "// wrong on every odd timed launch of case b: half of them\n"
CASES = [  # a correctness case, then two performance cases
    {"name": "small", "role": "correctness", "seed": 1, "scalars": {"n": 300}},
    {"name": "a", "role": "performance", "seed": 2, "scalars": {"n": 1000}},
    {"name": "b", "role": "performance", "seed": 3, "scalars": {"n": 2000}},
]


def test_the_escape_bound_is_the_hypergeometric_chance_of_missing_every_cheating_launch():
    assert escape([(100, 3)]) == pytest.approx(comb(50, 3) / comb(100, 3)) == pytest.approx(0.1212, abs=1e-4)
    rounds_then_audit = [(100, 3)] * 3 + [(100, 2)]  # the default protocol: three rounds, then two more checks
    assert escape(rounds_then_audit) == pytest.approx(0.12121 ** 3 * comb(50, 2) / comb(100, 2), rel=1e-3)
    assert escape(rounds_then_audit) < 2 ** -11 < 0.001
    assert escape([(101, 11)]) < 2 ** -11 and escape([(4, 3)]) == 0.0  # an odd count; more checks than honest launches
    assert sum(2.0 ** -(FIRST_AUDIT + i) for i in range(200)) <= 2 ** -10 < 0.001  # every audit of a run, together


class FakeGpu:
    """A lane of the pool: each request runs in this process on a Runner over a FakeDevice. The kernel
    is honest (0.02 ms a launch) unless its source is CHEAT (0.01 ms a launch, and on case b a copy of
    its input on every odd timed launch). ``seeds`` fixes the protocol seed of requests by id."""

    def __init__(self, seeds: dict[str, int]):
        self.seeds, self.requests, self.source, self.launches = seeds, [], "", 0
        self.device = FakeDevice()
        self.device.kernel("relu", self._run, SIZES, lambda _: 0.01 if self.source == CHEAT else 0.02)
        self.runner = Runner(self.device)
        self.info = self.device.info()

    @property
    def ref(self) -> GpuRef:
        return GpuRef.of(self.info, 0)

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def prefetch(self, kernels) -> None:
        pass

    def evaluate(self, request, on_event=None):
        request = request.model_copy(deep=True)
        request.protocol.seed = self.seeds.get(request.id, 1000 + len(self.requests))
        self.requests.append(request)
        self.source, self.launches = request.kernel.source, 0
        return self.runner.evaluate(request)

    def _run(self, dev, launch, x, y, n):
        relu(dev, launch, x, y, n)
        if self.source == CHEAT and int(n) == 2000:
            self.launches += 1
            timed = self.launches - 3 - PROTOCOL.warmup - 1  # after the three input sets and the warm-ups
            if timed >= 0 and timed % 2:
                dev.view(y, np.float32, int(n))[:] = dev.view(x, np.float32, int(n))


def experiment(tmp_path):
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "relu.cu").write_text(SOURCE)
    (tmp_path / "reference.py").write_text(REFERENCE)
    cases = [{**c, "inputs": {"x": {"shape": ["n"], "init": {"dist": "uniform", "low": -1, "high": 1}}},
              "outputs": {"y": {"shape": ["n"]}}} for c in CASES]
    (tmp_path / "cases.json").write_text(json.dumps({"launch": {"grid": ["cdiv(n, 256)"], "block": [256]},
                                                     "cases": cases}))
    (tmp_path / "experiment.json").write_text(json.dumps({
        "description": "ReLU", "signature": SIGNATURE, "reference": "reference.py", "initial_kernel": "relu.cu",
        "input_cases": "cases.json", "timing": PROTOCOL.model_dump(exclude={"seed"})}))
    return load_experiment(tmp_path / "experiment.json")


def seed_where(checked: int, caught: bool) -> int:
    """A seed whose checked launches of case b include an odd timed launch (``caught``) or only even ones."""
    protocol = PROTOCOL.model_copy(update={"checked_launches": checked})
    return next(s for s in range(1, 10_000)
                if any(i % 2 for i in draw_plan(s, "b", protocol).checked) == caught)


def test_a_kernel_cheating_on_half_of_one_cases_timed_launches_is_refused_by_the_crowning_audit(tmp_path):
    """The cheat escapes its evaluation and its three finalists' rounds (9 checked launches of case
    b, each round with a chance of C(10,3)/C(20,3) = 10.5%: seeds chosen so), and is the fastest;
    the audit's own evaluation checks the 2 launches that make 11, catches it and refuses it. The
    honest baseline is then audited (12 checked launches per case, this run's second audit) and
    crowned."""
    lucky, caught = seed_where(3, caught=False), seed_where(2, caught=True)
    seeds = {"attempt-1": lucky, **{f"finalist-1-{r}": lucky for r in range(3)}, "audit-1-0": caught}
    gpu = FakeGpu(seeds)
    exp = experiment(tmp_path / "exp")
    run = RunDir.create(tmp_path / "results")
    with Dispatcher([gpu]) as pool:
        rec = Recorder(exp, run, pool, strategy="tune", model={"model": None}, prices={})
        baseline = rec.ensure_baseline()
        cheat = rec.evaluate("proposal", CHEAT, None)
        assert baseline.status == cheat.status == "ok" and cheat.score_us < baseline.score_us
        audit = crown(rec)
    refused, crowned = audit.audits
    assert (refused.attempt, refused.status, refused.required, refused.rounds) == (cheat.id, "mismatch", 11, 3)
    assert "case b:" in refused.reason and "timed" in refused.reason
    assert crowned.attempt == baseline.id == audit.winner and crowned.status == "ok"
    assert crowned.required == 12 and crowned.rounds == 0 and crowned.evaluations == 4  # 3 + 3 + 3 + 3
    assert audit.checked_launches_per_case == {"small": 12, "a": 12, "b": 12}  # small: its 3 input sets, 4 times
    assert audit.escape_bound == pytest.approx((comb(10, 3) / comb(20, 3)) ** 4) and audit.escape_bound < 2 ** -12
    assert audit.run_escape_bound == pytest.approx(refused.escape_bound + crowned.escape_bound)
    assert audit.run_escape_bound < 2 ** -10
    assert [r.id for r in gpu.requests[2:]] == ["finalist-1-0", "finalist-1-1", "finalist-1-2", "audit-1-0",
                                               *[f"audit-0-{i}" for i in range(4)]]
    assert all({c.name for c in r.cases} == {"small", "a", "b"} for r in gpu.requests)  # as every attempt is
    summary = Summary.model_validate(run.read_json("summary.json"))
    assert summary.best_attempt == baseline.id and summary.audit == audit
    assert "wrong on every odd timed launch" not in run.file("best.cu").read_text()


def test_an_honest_winner_alone_is_measured_again_and_audited_to_eleven_checked_launches_per_case(tmp_path):
    gpu = FakeGpu({})
    run = RunDir.create(tmp_path / "results")
    with Dispatcher([gpu]) as pool:
        rec = Recorder(experiment(tmp_path / "exp"), run, pool, strategy="tune", model={"model": None}, prices={})
        rec.ensure_baseline()
        audit = crown(rec)
    (only,) = audit.audits
    assert only.attempt == audit.winner == 0 and only.rounds == 3 and only.evaluations == 1
    # 3 rounds of 3 checked timed launches, then one evaluation of 2; every launch of the correctness case
    assert audit.checked_launches_per_case == {"small": 12, "a": 11, "b": 11}
    assert [r.protocol.checked_launches for r in gpu.requests[1:]] == [3, 3, 3, 2]
    assert audit.escape_bound == pytest.approx((comb(10, 3) / comb(20, 3)) ** 3 * comb(10, 2) / comb(20, 2))
    assert rec.finalists.winner == 0 and [f.attempt for f in rec.finalists.finalists] == [0]
