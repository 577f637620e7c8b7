"""The ``tune`` strategy: every configuration of a tunable kernel checked on all cases and timed.

Exhaustive when the space fits in ``max_evals``; otherwise a seeded TPE search (optuna) proposes
the configurations. A configuration that fails to compile or launch is recorded with its
reason and told to the sampler as a failure, never as a time. Needs no model.

Every GPU of the pool works on the sweep: an exhaustive one hands over all its configurations
at once, a sampled one asks the sampler for as many configurations as there are GPUs before it
tells it their scores (seeded, so a search repeats itself on the same number of GPUs).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from ..config import TuneSpace
from ..engine.recorder import Candidate, Recorder
from ..errors import ExperimentError
from ..wire.protocol import LaunchSpec
from .base import Context, register


@dataclass
class Tuner:
    """A search of a tunable kernel's space, each configuration evaluated through the run's recorder."""

    rec: Recorder
    source: str
    space: TuneSpace
    launch: LaunchSpec
    max_evals: int = 100
    time_limit_s: float | None = None
    seed: int = 0
    started: float = field(default_factory=time.monotonic, init=False)

    def done(self) -> dict[tuple, float | None]:
        """Configurations already evaluated in this run (on resume too), with their scores."""
        return {tuple(sorted(a.defines.items())): a.score_us for a in self.rec.attempts if a.kind == "tune"}

    def execute(self) -> str:
        """Evaluate configurations until the space, ``max_evals`` or the time limit runs out."""
        configs = self.space.configurations()
        if not configs:
            return "no configuration satisfies the restrictions"
        if len(configs) <= self.max_evals:
            return self._exhaustive(configs)
        return self._sampled()

    def _out_of_time(self) -> bool:
        return self.time_limit_s is not None and time.monotonic() - self.started >= self.time_limit_s

    def first_batch(self) -> list[Candidate]:
        """What :meth:`execute` measures first when it is known up front: an exhaustive sweep's
        configurations not yet evaluated (a sampled search asks its sampler as it goes)."""
        return self._candidates(self._todo(self.space.sweep(self.max_evals)))

    def _todo(self, configs: list[dict]) -> list[dict]:
        """The configurations this run has not evaluated yet."""
        done = self.done()
        return [c for c in configs if tuple(sorted(c.items())) not in done]

    def _candidates(self, configs: list[dict]) -> list[Candidate]:
        parent = self.rec.baseline.id if self.rec.baseline else None
        return [Candidate("tune", self.source, self.launch, dict(c), parent, what=f"tuning {c}") for c in configs]

    def _evaluate(self, configs: list[dict]) -> list[float | None] | None:
        """Scores of the configurations, measured together; None when the time limit stopped them."""
        attempts = self.rec.evaluate_many(self._candidates(configs), should_stop=self._out_of_time)
        if any(a is None for a in attempts):
            return None
        return [a.score_us for a in attempts]

    def _exhaustive(self, configs: list[dict]) -> str:
        todo = self._todo(configs)
        if todo and self._evaluate(todo) is None:
            return "time limit reached"
        return "search space exhausted"

    def _sampled(self) -> str:
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        study = optuna.create_study(direction="minimize", sampler=optuna.samplers.TPESampler(seed=self.seed))
        done = self.done()
        for key, value in done.items():  # a resumed run teaches the sampler what it already knows
            draw = optuna.trial.create_trial(
                params=dict(key),
                distributions={k: optuna.distributions.CategoricalDistribution(v) for k, v in self.space.tunables.items()},
                value=value, state=optuna.trial.TrialState.COMPLETE if value else optuna.trial.TrialState.FAIL,
            )
            study.add_trial(draw)
        evaluated = len(done)
        draws = 0
        width = len(self.rec.evaluator.gpus())

        def tell(draw, value: float | None) -> None:
            if value is None:
                study.tell(draw, state=optuna.trial.TrialState.FAIL)
            else:
                study.tell(draw, value)

        while evaluated < self.max_evals and draws < 50 * self.max_evals:
            if self._out_of_time():
                return "time limit reached"
            batch: dict[tuple, list] = {}  # configuration -> the sampler's draws of it
            while len(batch) < min(width, self.max_evals - evaluated) and draws < 50 * self.max_evals:
                draws += 1
                draw = study.ask()
                config = {name: draw.suggest_categorical(name, values)
                          for name, values in self.space.tunables.items()}
                key = tuple(sorted(config.items()))
                if not self.space.allows(config):
                    study.tell(draw, state=optuna.trial.TrialState.PRUNED)
                elif key in done:
                    tell(draw, done[key])
                else:
                    batch.setdefault(key, []).append(draw)
            if not batch:
                continue
            scores = self._evaluate([dict(key) for key in batch])
            if scores is None:
                return "time limit reached"
            for (key, picks), value in zip(batch.items(), scores, strict=True):
                done[key] = value
                evaluated += 1
                for draw in picks:
                    tell(draw, value)
        return "evaluation budget exhausted" if evaluated >= self.max_evals else "search space exhausted"


def need_tuning(experiment, origin: str) -> None:
    """Bad input unless the experiment declares a tunable kernel."""
    if experiment.tuning is None:
        raise ExperimentError(origin, "tune", "the experiment declares no tunable kernel; --strategy tune and "
                                              "--ablation need a 'tune' section (kernel, tunables, launch)")


@register("tune")
class TuneStrategy:
    """Search the experiment's tunable kernel (its ``tune`` section); no model."""

    needs_model = False
    needs_initial_kernel = True  # the baseline every configuration is measured against

    def check(self, experiment, origin: str) -> None:
        need_tuning(experiment, origin)

    def ahead(self, ctx: Context) -> list[Candidate]:
        return _tuner(ctx).first_batch()

    def run(self, ctx: Context) -> str:
        return _tuner(ctx).execute()


def _tuner(ctx: Context) -> Tuner:
    tuning = ctx.recorder.exp.tuning
    return Tuner(ctx.recorder, tuning.source, tuning.space, tuning.launch, max_evals=ctx.max_evals,
                 time_limit_s=ctx.budget.time_limit_s, seed=ctx.seed)
