"""The result cache beside the run directories (``results/cache/``)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from ..wire.protocol import EvalRequest
from ..wire.results import DeviceInfo, EvalResult
from .rundir import write_atomic


class ResultCache:
    """Evaluation results keyed by (source, defines, launch, cases, protocol, GPU model, driver).

    Kept beside the run directories (``results/cache/``), so an identical configuration is
    never measured twice within a run, and a re-run picks up where an earlier one stopped. Any
    GPU of the model may have measured a result: measurements of one model are what a run compares.
    """

    def __init__(self, folder: Path, device: DeviceInfo):
        self.folder = folder
        self.device = device.model_dump(include={"name", "arch", "driver_cuda_version"})

    def key(self, request: EvalRequest) -> str:
        # how long a kernel may run is not a property of its result
        data = request.model_dump(mode="json", exclude={"id", "timeouts"})
        return hashlib.sha256(json.dumps([data, self.device], sort_keys=True).encode()).hexdigest()

    def path(self, request: EvalRequest) -> Path:
        return self.folder / f"{self.key(request)}.json"

    def __contains__(self, request: EvalRequest) -> bool:
        """Whether a result is kept for ``request`` (not read: :meth:`get` reads it, and answers
        None for one it cannot read)."""
        return self.path(request).is_file()

    def get(self, request: EvalRequest) -> EvalResult | None:
        path = self.path(request)
        if not path.is_file():
            return None
        try:
            return EvalResult.model_validate_json(path.read_text())
        except ValueError:  # written by another version, or damaged: measure again
            return None

    def put(self, request: EvalRequest, result: EvalResult) -> None:
        if result.status in ("timeout", "crashed", "internal_error"):
            return  # not a property of the kernel alone: measure again next time
        write_atomic(self.path(request), result.to_json())
