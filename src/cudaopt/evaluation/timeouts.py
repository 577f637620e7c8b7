"""Phase timeouts scaled from what a run measured, so a hanging candidate costs seconds.

Before anything is measured (a run's first evaluation, ``cudaopt evaluate``, ``verify``) each
phase gets the experiment's fixed limits. Once the run's baseline has passed, each case's check
and timing limits become ``multiple`` times the baseline's wall time in that phase of that case,
never below ``floor_s`` nor above the fixed limit. The baseline's first evaluation includes the
one-off work a fresh worker repeats after a kill (host inputs, the reference's answers), so the
scaled limits cover a candidate that runs right after a respawn.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..harness.protocol import CaseTimeouts, Timeouts

# which of a case's recorded ``phases`` (harness/runner.py) belong to the supervisor's phases
CHECK_STEPS = ("setup_s", "reference_s", "check_s")
TIMING_STEPS = ("timing_s", "timed_checks_s")


@dataclass(frozen=True)
class TimeoutPolicy:
    compile_s: float = 60.0
    check_s: float = 300.0  # before anything is measured, and the ceiling after
    timing_s: float = 300.0
    multiple: float | None = 20.0  # None: the fixed limits always
    floor_s: float = 10.0

    def fixed(self) -> Timeouts:
        return Timeouts(compile_s=self.compile_s, check_s=self.check_s, timing_s=self.timing_s)

    def scaled(self, cases: list[dict]) -> Timeouts:
        """Limits from a passing evaluation's cases (``CaseResult`` dicts with ``phases``)."""
        timeouts = self.fixed()
        if self.multiple is None:
            return timeouts
        for case in cases:
            phases = case.get("phases") or {}
            if case.get("status") != "ok" or not phases:
                continue
            check = self._limit(sum(phases.get(k, 0.0) for k in CHECK_STEPS), self.check_s)
            timed = [phases[k] for k in TIMING_STEPS if k in phases]
            timing = self._limit(sum(timed), self.timing_s) if timed else self.timing_s
            timeouts.cases[case["name"]] = CaseTimeouts(check_s=check, timing_s=timing)
        if timeouts.cases:
            timeouts.basis = (f"{self.multiple:g}x the baseline's time in this phase, at least {self.floor_s:g} s, "
                              f"at most the fixed limit; set in the experiment's timeouts section")
        return timeouts

    def _limit(self, measured_s: float, ceiling_s: float) -> float:
        return round(min(ceiling_s, max(self.floor_s, self.multiple * measured_s)), 3)
