"""What an export is made from: a kernel as verified, its launch, its shapes and where it came from.

Made from a :class:`~cudaopt.trial.Trial`, built as every command builds one: from a run directory,
its winner as shipped (``best.cu`` and ``best-launch.json``, tunables baked in: record/bake.py) of a
run whose experiment is unchanged (the lock) and whose winner passed ``cudaopt verify``
(``verify.json``); or from an experiment and a kernel given by flags, prepared with every check of
``cudaopt check`` (its launch on every case included). A kernel that did not pass verify is refused
unless the caller says ``unverified``: the export would hand over code nobody checked on the holdout
cases.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import ExperimentError
from ..experiment import Experiment
from ..record.rundir import RunDir
from ..record.runs import open_run, read_run_json
from ..trial import Trial, prepare_trial, winner_trial
from ..record.files import Environment, Summary, VerifyOutcome
from ..wire.launch import DEVICE_NAMES, NOMINAL_DEVICE
from ..wire.protocol import CaseSpec, Expr, LaunchSpec
from ..wire.signature import Signature, entry_names


@dataclass
class Provenance:
    """Where an exported kernel came from, written as the header comment of every file."""

    origin: str  # the run directory, or the kernel file
    verified: str  # what verify said, or why there is no verdict
    lock: dict[str, str] = field(default_factory=dict)
    gpu: str = ""
    figures: list[str] = field(default_factory=list)
    exported_at: str = field(default_factory=lambda: dt.datetime.now(dt.UTC).isoformat(timespec="seconds"))
    passed: bool = False  # whether `cudaopt verify` passed this kernel

    @property
    def kind(self) -> str:
        """What the kernel is, for the first line of a file's header: never "verified" unless it was."""
        return "a kernel verified by cudaopt" if self.passed else \
            "a kernel checked by cudaopt, not verified (exported with --unverified)"

    def lines(self) -> list[str]:
        from importlib.metadata import PackageNotFoundError, version

        try:
            made_by = f"cudaopt {version('cudaopt')}"
        except PackageNotFoundError:  # pragma: no cover - a source checkout without metadata
            made_by = "cudaopt"
        out = [f"exported by {made_by} on {self.exported_at}", f"from: {self.origin}", f"verify: {self.verified}"]
        if self.gpu:
            out.append(f"measured on: {self.gpu}")
        out += [f"lock {key}: {value}" for key, value in self.lock.items()]
        # a path whose name is no UTF-8 (Python holds its bytes as surrogates) is written escaped
        return [line.encode("utf-8", "backslashreplace").decode("utf-8") for line in out + self.figures]


@dataclass
class ExportSource:
    """A kernel ready to export: its source as compiled and verified, one launch for every case."""

    signature: Signature
    entry: str  # the kernel the launch names by default
    source: str
    launch: LaunchSpec
    cases: list[CaseSpec]
    provenance: Provenance
    experiment: Experiment
    num_sms: int = NOMINAL_DEVICE["num_sms"]  # the SM count of the GPU it was verified on

    @property
    def name(self) -> str:
        return self.signature.name

    @property
    def kernels(self) -> list[str]:
        """Every kernel the source declares plainly (what a launch's ``entry`` may choose from)."""
        return list(dict.fromkeys([self.entry, *entry_names(self.source)]))

    def shapes(self) -> dict[str, list[Expr]]:
        """Each pointer argument's shape expressions, the same in every case (an export has one)."""
        found: dict[str, tuple[str, list[Expr]]] = {}
        for case in self.cases:
            for name, spec in [*case.inputs.items(), *case.outputs.items()]:
                shape = [s.strip() if isinstance(s, str) else s for s in spec.shape]
                first = found.setdefault(name, (case.name, shape))
                if first[1] != shape:
                    raise ExperimentError(self.experiment.cases_path, f"{case.name}.{name}.shape",
                                          f"{shape} differs from {first[1]} in case {first[0]}: an exported op "
                                          "computes every shape from the scalars by one rule")
        return {a.name: found[a.name][1] for a in self.signature.args if a.pointer}

    def inferred(self) -> dict[str, tuple[str, int]]:
        """The scalars read off the inputs' shapes: scalar -> (input, dimension) whose shape is that name."""
        shapes = self.shapes()
        found: dict[str, tuple[str, int]] = {}
        for arg in self.signature.inputs:
            for dim, text in enumerate(shapes[arg.name]):
                if isinstance(text, str) and text in {s.name for s in self.signature.scalars}:
                    found.setdefault(text, (arg.name, dim))
        return found

    def names(self) -> set[str]:
        """What the launch expressions may use: the signature's scalars and the GPU's facts."""
        return {a.name for a in self.signature.scalars} | set(DEVICE_NAMES)


def from_run(path: Path, *, unverified: bool = False) -> ExportSource:
    """A run's winner as shipped; refused when verify did not pass it (unless ``unverified``)."""
    run = open_run(path)
    trial = winner_trial(run, what="export", checks=False)  # checked when the run recorded it
    summary = read_run_json(run, RunDir.SUMMARY, Summary)
    verdict = _verdict(run, trial.attempt.id)
    if verdict is not None and not unverified:
        raise ExperimentError(run.file(RunDir.VERIFY), "passed", f"{verdict}; run `cudaopt verify {path}` first, or "
                                                                 "give --unverified to export it anyway")
    env = read_run_json(run, RunDir.ENV, Environment) if run.file(RunDir.ENV).is_file() else None
    gpu = env.gpu if env else None
    provenance = Provenance(
        origin=f"run {run.path.resolve()} (attempt {trial.attempt.id}, {summary.strategy})",
        verified=verdict or f"passed ({RunDir.VERIFY}: every case, holdout included)",
        lock=_lock_hashes(trial.experiment),
        gpu=f"{gpu.name} ({gpu.arch}, {gpu.sm_count} SMs)" if gpu else "",
        figures=_figures(summary), passed=verdict is None)
    return from_trial(trial, provenance, gpu.sm_count if gpu and gpu.sm_count else NOMINAL_DEVICE["num_sms"])


def from_flags(experiment: Experiment, *, kernel: Path | None, entry: str | None, launch: str | None,
               unverified: bool = False) -> ExportSource:
    """A kernel given with an experiment (default: its initial kernel), never verified by cudaopt:
    refused unless ``unverified``, then prepared as every command prepares a kernel (its launch
    checked on every case)."""
    if not unverified:
        raise ExperimentError("--kernel", "", "a kernel given by flags has not passed `cudaopt verify`: export a "
                                              "verified run's winner (cudaopt export RUN_DIR), or give --unverified")
    trial = prepare_trial(experiment, kernel, entry=entry, launch=launch)
    provenance = Provenance(origin=f"kernel {trial.kernel.resolve()} (experiment "
                                   f"{trial.experiment.cases_path.parent.resolve()})",
                            verified="not verified: given by flags (--unverified)",
                            lock=_lock_hashes(trial.experiment))
    return from_trial(trial, provenance)


def from_trial(trial: Trial, provenance: Provenance, num_sms: int = NOMINAL_DEVICE["num_sms"]) -> ExportSource:
    """The Trial's kernel with one launch for every case: its own, else the cases' shared one."""
    experiment = trial.experiment
    return ExportSource(signature=experiment.signature, entry=trial.entry_name, source=trial.source,
                        launch=trial.launch or _cases_launch(experiment), cases=experiment.case_specs,
                        provenance=provenance, experiment=experiment, num_sms=num_sms)


def _lock_hashes(experiment: Experiment) -> dict[str, str]:
    """The hashes a header names: the lock, the reference's and the input cases' (a run's lock.json
    matched them when the run was opened)."""
    lock = experiment.lock()
    return {"lock": lock.lock, "reference": lock.reference, "input_cases": lock.input_cases}


def _verdict(run, attempt: int) -> str | None:
    """None when verify passed this attempt; else why the export needs --unverified."""
    if not run.file(RunDir.VERIFY).is_file():
        return f"the winner was never verified (no {RunDir.VERIFY})"
    outcome = read_run_json(run, RunDir.VERIFY, VerifyOutcome)
    if outcome.attempt != attempt:
        return f"{RunDir.VERIFY} is about attempt {outcome.attempt}, the winner is attempt {attempt}"
    if not outcome.passed:
        return f"the winner failed verify ({outcome.status}{': ' + outcome.reason if outcome.reason else ''})"
    return None


def _cases_launch(experiment: Experiment) -> LaunchSpec:
    """The input cases' launch, when every case has the same one (an export has one launch)."""
    launches = {c.launch.to_json() if c.launch else "": c for c in experiment.case_specs}
    if len(launches) != 1 or "" in launches:
        raise ExperimentError(experiment.cases_path, "launch", "the cases do not share one launch: give --launch "
                                                               "(expressions over the scalars)")
    return next(iter(launches.values())).launch


def _figures(summary: Summary) -> list[str]:
    out = []
    if summary.best_score_us is not None:
        speedup = f", {summary.speedup:.2f}x over the {summary.baseline}" if summary.speedup else ""
        out.append(f"score: {summary.best_score_us:.3f} us (geomean of the performance cases){speedup}")
    for case in summary.cases:
        if case.best_median_us is not None:
            vendors = "".join(f"; {v.label} {v.median_us:.3f} us" for v in case.vendors if v.median_us is not None)
            out.append(f"case {case.name}: {case.best_median_us:.3f} us{vendors}")
    return out
