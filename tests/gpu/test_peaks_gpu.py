"""Measured peaks on the GPU: `cudaopt doctor --measure`, the worker's cache, the roofline."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from tests.conftest import kernel_source
from tests.gpu.conftest import FAST

pytestmark = pytest.mark.gpu


def test_doctor_measure_shows_spec_and_measured_peaks_and_caches_them(tmp_path):
    from cudaopt.doctor import measure_peaks

    result = CliRunner(env={"COLUMNS": "200", "XDG_CACHE_HOME": str(tmp_path)}).invoke(app, ["doctor", "--measure"])
    assert "peaks: spec vs measured" in result.output and "memory bandwidth" in result.output, result.output
    (cached,) = (tmp_path / "cudaopt" / "peaks").glob("*.json")
    figures = json.loads(cached.read_text())
    assert 1e12 < figures["bytes_per_s"] < 10e12  # 1-10 TB/s on a datacenter GPU
    assert figures["flops_per_s"]["float32"] > figures["flops_per_s"]["float64"] > 0
    rows, _ = measure_peaks()
    bandwidth = rows[0]
    assert bandwidth.measured < 1.2 * bandwidth.spec  # a copy cannot beat the DRAM by much


def test_the_worker_uses_measured_roofs(supervisor, sgemm):
    assert supervisor.device_info().measured_peaks.bytes_per_s > 1e11
    request = sgemm.request(kernel_source("tiled.cu"), protocol=FAST)
    request.cases = [c for c in request.cases if c.name == "square-256"]
    result = supervisor.evaluate(request)
    roof = result.case("square-256").roofline
    assert roof.peak_tflops_from == roof.peak_gbps_from == "measured"
    assert 0 < roof.compute_pct < 100 and roof.floor_us < result.case("square-256").timing.median_us
