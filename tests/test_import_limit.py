"""The KernelBench import's time limit follows what the problem's sizes need: a floor while the
file is read, then the CPU work of the import at the sizes the child reports, at most the cap."""

from __future__ import annotations

import time

import pytest

from cudaopt.errors import ExperimentError
from cudaopt.kernelbench import isolated
from cudaopt.kernelbench.isolated import CPU_BYTES, READ_S, Sizes, needed_s
from tests.conftest import optional


def test_a_small_problem_gets_the_floor_and_a_large_one_more():
    relu = Sizes(nbytes=2 * 16 * 16384 * 4)
    gemm = Sizes(nbytes=3 * 4096 * 4096 * 4, flops=2 * 4096**3)
    assert needed_s(relu) == pytest.approx(READ_S, abs=0.1)
    assert needed_s(gemm) == pytest.approx(READ_S + 10 * (0.8 + 13.7), rel=0.02)  # about 265 s
    assert needed_s(Sizes(nbytes=3 * 8192**2 * 4, flops=2 * 8192**3)) > needed_s(gemm)


def test_bytes_beyond_what_the_cpu_runs_count_up_to_it_and_flops_in_proportion():
    at_limit = needed_s(Sizes(nbytes=CPU_BYTES, flops=10**12))
    assert needed_s(Sizes(nbytes=4 * CPU_BYTES, flops=4 * 10**12)) == pytest.approx(at_limit)
    assert needed_s(Sizes(nbytes=100 * CPU_BYTES)) == needed_s(Sizes(nbytes=CPU_BYTES))


HANGS_IN_FORWARD = ("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                    "    def forward(self, x):\n        while True:\n            pass\n\n\n"
                    "def get_inputs():\n    return [torch.randn(16)]\n\n\ndef get_init_inputs():\n    return []\n")


def test_a_forward_that_never_returns_is_stopped_at_what_its_sizes_need(tmp_path, monkeypatch):
    optional("torch")
    monkeypatch.setattr(isolated, "READ_S", 15.0)  # the floor, in this process where the limit is kept
    problem = tmp_path / "hang.py"
    problem.write_text(HANGS_IN_FORWARD)
    start = time.monotonic()
    with pytest.raises(ExperimentError, match=r"did not finish within 15 s \(what its sizes need\)"):
        isolated.import_isolated(problem, tmp_path / "out")  # no cap given: the sizes decide
    assert time.monotonic() - start < 40


def test_a_problem_that_hangs_while_it_is_read_is_stopped_at_the_floor(tmp_path, monkeypatch):
    optional("torch")  # the import reads a problem only where torch is
    monkeypatch.setattr(isolated, "READ_S", 3.0)
    problem = tmp_path / "hang_at_import.py"
    problem.write_text("while True:\n    pass\n")
    with pytest.raises(ExperimentError, match=r"within 3 s \(reading the problem and making its inputs\)"):
        isolated.import_isolated(problem, tmp_path / "out")
    assert not (tmp_path / "out" / "experiment.json").exists()


def test_a_cap_short_of_what_the_sizes_need_says_so_rather_than_blame_the_problem(tmp_path):
    optional("torch")
    problem = tmp_path / "big.py"  # 128 MiB of inputs (its forward's flops never counted): 125 s on the CPU
    problem.write_text(HANGS_IN_FORWARD.replace("torch.randn(16)", "torch.randn(4096, 4096), torch.randn(4096, 4096)")
                       .replace("def forward(self, x):", "def forward(self, a, b):"))
    with pytest.raises(ExperimentError, match=r"within 12 s \(--time-limit\), short of the 125 s its sizes may need "
                                              r"on this CPU \(--time-limit raises the limit\)$"):
        isolated.import_isolated(problem, tmp_path / "out", timeout_s=12)
