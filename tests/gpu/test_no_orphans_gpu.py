"""On the GPU: `cudaopt evaluate` of a kernel that spins forever, stopped by SIGTERM, SIGHUP or
SIGKILL while its worker is hung in the check phase, leaves no worker and no compiler process."""

from __future__ import annotations

import json
import shutil
import signal
import time

import pytest

from tests.conftest import KERNELS, SGEMM
from tests.test_no_orphans import SIGNALS, descendants, start, stop_and_check, wait_for

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_evaluate_of_a_hanging_kernel_leaves_no_worker_when_stopped(tmp_path, signum):
    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    config = json.loads((folder / "experiment.json").read_text())
    config.update(timeouts={"multiple": None, "check_s": 600, "timing_s": 600})  # the hang lasts
    (folder / "experiment.json").write_text(json.dumps(config))
    parent = start(["-m", "cudaopt", "evaluate", "--config", str(folder / "experiment.json"),
                    "--kernel", str(KERNELS / "spin_forever.cu"), "--no-time-reference", "--iterations", "10"],
                   tmp_path)

    def worker_started():
        return [p for p in descendants(parent.pid) if b"cudaopt.worker.main" in _cmdline(p)]

    wait_for(worker_started, "a GPU worker started", parent)
    time.sleep(20.0)  # compiled, the first cases checked, the 256³ case spinning
    started = descendants(parent.pid)
    assert any(b"cudaopt.worker.main" in _cmdline(p) for p in started)
    stop_and_check(parent, signum, started)


def _cmdline(pid: int) -> bytes:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as fh:
            return fh.read()
    except OSError:
        return b""
