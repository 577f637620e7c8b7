"""JSON Schemas of every file cudaopt reads or writes (what its readers accept), for editors and tools.

``python -m cudaopt.schemas DIR`` writes them (``docs/schemas/`` holds the current ones;
a test fails when they drift from the models).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from pydantic import TypeAdapter

from .config import CasesFile, ExperimentConfig
from .experiment import ExperimentLock
from .reading import LaunchFile
from .fleet.files import AuditReport
from .guard.files import GuardBaseline, GuardReport
from .wire.messages import WorkerMessage
from .wire.protocol import EvalRequest
from .wire.results import EvalResult
from .insight.card import ProfileRecord
from .record.rundir import RunDir
from .record.runs import RunSettings
from .record.files import Environment, History, ModelCall, ReplayOutcome, Summary, VerifyOutcome
from .record.dispatch_table import DispatchTable

# file name pattern -> its model; the run directory first, then what a user writes, then the wire
FILES = {
    RunDir.HISTORY: History,
    RunDir.SUMMARY: Summary,
    "model-NNN.json": ModelCall,
    RunDir.SETTINGS: RunSettings,
    RunDir.LOCK: ExperimentLock,
    RunDir.ENV: Environment,
    RunDir.VERIFY: VerifyOutcome,
    RunDir.REPLAY: ReplayOutcome,
    "guard.json": GuardBaseline,
    "guard-check.json": GuardReport,
    "best-case-N.json": EvalRequest,
    RunDir.BEST_LAUNCH: LaunchFile,
    RunDir.DISPATCH: DispatchTable,
    "profiles-attempt-N.json": ProfileRecord,
    "cache-result.json": EvalResult,
    "audit.json": AuditReport,
    "experiment.json": ExperimentConfig,
    "input_cases.json": CasesFile,
    "worker-message.json": WorkerMessage,
}


def schemas() -> dict[str, dict]:
    """File name of each schema -> the schema."""
    out = {}
    for name, model in FILES.items():
        schema = TypeAdapter(model).json_schema(mode="validation")
        schema["$id"] = f"cudaopt/{name.removesuffix('.json')}.schema.json"
        schema.setdefault("description", f"cudaopt {name}")
        out[f"{name.removesuffix('.json')}.schema.json"] = schema
    return out


def write(folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    written = []
    for name, schema in schemas().items():
        path = folder / name
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
        written.append(path)
    return written


if __name__ == "__main__":
    for path in write(Path(sys.argv[1] if len(sys.argv) > 1 else "docs/schemas")):
        print(path)
