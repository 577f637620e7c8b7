"""The run directory ``results/run-NNN/``: every artifact of one optimisation run.

Files are written atomically (a temporary file, then a rename), so a run killed at any moment
leaves complete files behind; ``history.json`` is rewritten after every attempt, so at most the
attempt in flight is lost.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Any

_RUN = re.compile(r"run-(\d{3,})$")


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


_FILE_MODE = 0o666 & ~_umask()  # what open() would give: a run's files readable like any other


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, _FILE_MODE)  # mkstemp makes 0600
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, allow_nan=True, default=str) + "\n")


def read_json(path: Path) -> Any:
    return json.loads(path.read_text())


class RunDir:
    """One run's directory. ``create`` picks the next free ``run-NNN``; nothing is overwritten.

    It owns the names of a run's files (docs/optimize.md describes each): everything that reads
    or writes one names it by these, and nothing else spells them."""

    HISTORY = "history.json"
    SUMMARY = "summary.json"
    SETTINGS = "settings.json"
    LOCK = "lock.json"
    ENV = "env.json"
    VERIFY = "verify.json"
    REPLAY = "replay.json"
    DISPATCH = "dispatch.json"
    BEST = "best.cu"
    BEST_LAUNCH = "best-launch.json"
    BEST_CASES = "best-case-*.json"
    MODEL_CALLS = "model-*.json"
    REPORT = "report.html"
    HEATMAP_PNG = "heatmap.png"
    HEATMAP_SVG = "heatmap.svg"
    LOG = "run.log"
    CANDIDATES = "candidates"
    PROFILES = "profiles/attempt-*.json"  # Nsight Compute's cards, one per attempt profiled
    SANITIZE = "sanitize"  # compute-sanitizer's logs
    EXPERIMENT = "experiment"  # the files of an experiment built in Python, kept with the run
    ABLATION = "ablation"  # the tune-only run of --ablation

    def __init__(self, path: Path):
        self.path = path

    @staticmethod
    def best_case(index: int) -> str:
        """The request of the winner on the case of that index (replayable alone)."""
        return f"best-case-{index}.json"

    @staticmethod
    def model_call(number: int) -> str:
        return f"model-{number:03d}.json"

    @staticmethod
    def profile(attempt: int) -> str:
        return f"profiles/attempt-{attempt}.json"

    @staticmethod
    def candidate(attempt: int) -> str:
        return f"{RunDir.CANDIDATES}/{attempt:03d}.cu"

    @classmethod
    def create(cls, results: Path) -> RunDir:
        results.mkdir(parents=True, exist_ok=True)
        while True:
            numbers = [int(m.group(1)) for p in results.iterdir() if (m := _RUN.match(p.name))]
            path = results / f"run-{max(numbers, default=0) + 1:03d}"
            try:
                path.mkdir()  # atomic: two runs starting together get different directories
            except FileExistsError:
                continue
            (path / cls.CANDIDATES).mkdir()
            return cls(path)

    @classmethod
    def create_at(cls, path: Path) -> RunDir:
        """A run directory at a fixed path that must not exist yet (e.g. a run's ablation/)."""
        path.mkdir(parents=True)
        (path / cls.CANDIDATES).mkdir()
        return cls(path)

    @classmethod
    def open(cls, path: Path) -> RunDir:
        if not (path / cls.HISTORY).is_file():
            raise FileNotFoundError(f"{path} is not a run directory (no {cls.HISTORY})")
        return cls(path)

    def file(self, name: str) -> Path:
        return self.path / name

    def write_json(self, name: str, data: Any) -> None:
        write_json(self.path / name, data)

    def write_model(self, name: str, model) -> None:
        """A typed file (record/files.py and the harness's types), as its JSON."""
        write_atomic(self.path / name, model.to_json(indent=2) + "\n")

    def read_json(self, name: str) -> Any:
        return read_json(self.path / name)

    def write_text(self, name: str, text: str) -> None:
        write_atomic(self.path / name, text)

    def log(self, message: str) -> None:
        """Append one line to run.log (kept free of secrets: callers log events, never settings)."""
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S")
        with open(self.path / self.LOG, "a") as fh:
            fh.write(f"{stamp} {message}\n")
