"""A kernel that never returns costs seconds even when nothing has been measured yet (evaluate,
guard, verify, replay, audit): its checked launches are held to a multiple of the reference's
time on the case, at least the policy's floor."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from cudaopt.config import TimeoutPolicy
from tests.conftest import KERNELS, ROOT, SGEMM, kernel_source

pytestmark = pytest.mark.gpu


def test_a_hang_before_any_baseline_costs_the_floor_not_the_fixed_limit(supervisor, small_request):
    timeouts = TimeoutPolicy().fixed()  # what evaluate, guard, verify, replay and audit send
    start = time.monotonic()
    result = supervisor.evaluate(small_request(kernel_source("spin_forever.cu"), timeouts=timeouts))
    assert time.monotonic() - start < 15 + 5  # the 10 s floor, the reference's answers, the odd case
    assert result.status == "timeout" and "launch phase ran past its 10 s timeout (20x the reference's" in result.reason
    assert result.case("odd-31x37x29").status == "ok"  # what finished before the hang is kept
    after = supervisor.evaluate(small_request(kernel_source("tiled.cu"), timeouts=timeouts))  # a fresh worker
    assert after.status == "ok", after.reason


def test_cudaopt_evaluate_of_a_hanging_kernel_ends_in_seconds():
    start = time.monotonic()
    done = subprocess.run([sys.executable, "-m", "cudaopt", "evaluate", "--config", str(SGEMM / "experiment.json"),
                           "--kernel", str(KERNELS / "spin_forever.cu"), "--no-time-reference", "--iterations", "10"],
                          capture_output=True, text=True, env={**os.environ, "PYTHONPATH": os.pathsep.join(
                              [str(ROOT / "src"), *filter(None, [os.environ.get("PYTHONPATH")])])},
                          timeout=120)
    wall = time.monotonic() - start
    assert done.returncode == 1, done.stdout + done.stderr
    assert "timeout" in done.stdout + done.stderr
    assert wall < 40, wall  # process start, checks, worker start and the odd case, then at most ~10 s of hang
