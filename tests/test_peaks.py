"""Measured peaks: the on-disk cache, the roofline arithmetic and the implausibility floor (no GPU)."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from cudaopt.worker import peaks
from cudaopt.worker.gpu import Peaks
from cudaopt.worker.peaks import MeasuredPeaks, judge_plausibility, roofline
from cudaopt.wire.protocol import Limits
from cudaopt.wire.results import CaseResult
from cudaopt.wire.signature import parse_signature
from tests.scripted import stats

H200 = {"name": "NVIDIA H200", "uuid": "GPU-1234", "pci_bus_id": "0000:19:00.0", "driver": "580.159.04"}


def measured(**identity) -> MeasuredPeaks:
    return MeasuredPeaks(bytes_per_s=4.3e12, flops_per_s={"float32": 60e12, "float64": 30e12},
                         identity={**H200, **identity}, measured_at="2026-11-30T12:00:00+00:00", method="test")


@pytest.fixture(autouse=True)
def cache_home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache"


def test_the_cache_lives_under_the_users_cache_directory(cache_home):
    path = peaks.save(measured())
    assert path.parent == cache_home / "cudaopt" / "peaks" and path.name.startswith("nvidia-h200-")
    assert json.loads(path.read_text())["bytes_per_s"] == 4.3e12
    assert peaks.load(H200) == measured()


def test_another_gpu_or_driver_does_not_read_the_figures(cache_home):
    peaks.save(measured())
    assert peaks.load({**H200, "driver": "590.1"}) is None  # a driver update: measure again
    assert peaks.load({**H200, "uuid": "GPU-5678"}) is None  # the same model, another card
    peaks.save(measured(uuid="GPU-5678"))
    assert peaks.load({**H200, "uuid": "GPU-5678"}).identity["uuid"] == "GPU-5678"
    assert peaks.load(H200) is not None


def test_a_corrupt_or_foreign_file_is_measured_again(cache_home):
    path = peaks.cache_path(H200)
    path.parent.mkdir(parents=True)
    path.write_text("{not json")
    assert peaks.load(H200) is None
    path.write_text(json.dumps({"bytes_per_s": "fast"}))
    assert peaks.load(H200) is None


def test_load_or_measure_measures_once_and_then_reads_the_cache(monkeypatch):
    calls = []
    monkeypatch.setattr(peaks, "identity", lambda gpu: H200)
    monkeypatch.setattr(peaks, "measure", lambda gpu: calls.append(gpu) or measured())
    assert peaks.load_or_measure("gpu") == measured()
    assert peaks.load_or_measure("gpu") == measured()
    assert len(calls) == 1


def test_roofline_uses_measured_roofs_and_says_so():
    roof = roofline(1e-3, 30e9, 2e9, spec_flops=500e12, spec_bytes=4.8e12, measured_flops=60e12,
                    measured_bytes=4.0e12)
    assert roof.achieved_tflops == 30.0 and roof.peak_tflops == 60.0 and roof.peak_tflops_from == "measured"
    assert roof.compute_pct == 50.0
    assert roof.achieved_gbps == 2000.0 and roof.peak_gbps == 4000.0 and roof.memory_pct == 50.0
    assert roof.peak_gbps_from == "measured"


def test_roofline_falls_back_to_spec_roofs():
    roof = roofline(1e-3, 30e9, 2e9, spec_flops=500e12, spec_bytes=4.8e12)
    assert roof.peak_tflops_from == roof.peak_gbps_from == "spec"
    assert roof.compute_pct == 6.0 and roof.memory_pct == pytest.approx(41.7)


def test_the_floor_uses_the_larger_of_spec_and_measured():
    # measured below spec (the usual case): the floor stays on the spec, a generous bound
    low = roofline(1e-3, 1e9, 4.8e6, spec_flops=500e12, spec_bytes=4.8e12, measured_flops=60e12, measured_bytes=4e12)
    assert low.floor_us == 2.0 and low.bound == "compute"  # 1e9 / 500e12 s, not 1e9 / 60e12
    # measured above spec (a spec table that undersells the part): the floor follows the measurement
    high = roofline(1e-3, None, 6e6, spec_flops=500e12, spec_bytes=3e12, measured_bytes=6e12)
    assert high.floor_us == 1.0 and high.bound == "memory"
    warm = roofline(1e-3, None, 6e9, spec_flops=500e12, spec_bytes=3e12, memory_floor=False)
    assert warm.floor_us is None and warm.memory_pct == 200.0  # L2 warm: no memory floor


SPEC = Peaks(bytes_per_s=4.8e12, flops_per_s={"float32": 535e12, "float32_cuda_cores": 67e12, "float64": 67e12,
                                              "bfloat16": 1070e12})


def _judge(median_us: float, measured_peaks: MeasuredPeaks | None, allow_tf32: bool = True,
           scalars: dict | None = None, precision: list[str] | None = None) -> CaseResult:
    out = CaseResult(name="square-4096", role="performance", status="ok", timing=stats(median_us))
    case = SimpleNamespace(flops="2*m*n*k", bytes="4*(m*k + k*n + m*n)",
                           scalars=scalars or {"m": 4096, "n": 4096, "k": 4096})
    signature = parse_signature('extern "C" __global__ void f(const float* a, const float* b, float* c, '
                                'int m, int n, int k)')
    limits = Limits(allow_tf32=allow_tf32, precision=precision)
    judge_plausibility(out, case, signature, limits, True, SPEC, measured_peaks)
    return out


def test_a_kernel_faster_than_the_measured_fma_peak_is_not_rejected_when_tensor_cores_are_allowed():
    # 2*4096^3 flops in 1000 us is 137 TFLOP/s: above the measured FP32 FMA rate (a tensor-core
    # kernel could do it), below the spec matrix-unit rate: plausible, 229% of the measured roof
    out = _judge(1000.0, measured())
    assert out.status == "ok" and out.roofline.peak_tflops_from == "measured"
    assert out.roofline.compute_pct == pytest.approx(229.1, abs=0.1)
    assert _judge(200.0, measured()).status == "implausible"  # 687 TFLOP/s: above every peak
    assert _judge(1000.0, None).roofline.peak_tflops_from == "spec"


def test_float32_without_tensor_cores_is_held_to_the_cuda_core_rate():
    # the same 137 TFLOP/s is twice what the CUDA cores can do: a cheat, unless TF32 is allowed
    strict = _judge(1000.0, measured(), allow_tf32=False)
    assert strict.status == "implausible" and "float32 cuda cores" in strict.reason
    assert strict.roofline.floor_rate == "float32_cuda_cores"
    honest = _judge(3000.0, measured(), allow_tf32=False)  # 46 TFLOP/s, cuBLAS territory
    assert honest.status == "ok"
    assert _judge(1000.0, measured(), allow_tf32=False, precision=["tf32"]).status == "ok"  # the list says it too


def test_the_floor_follows_the_fastest_math_the_policy_allows():
    """FP32 data with BF16 tensor cores allowed is bounded by the BF16 rate, not the CUDA cores'."""
    bf16 = _judge(200.0, None, allow_tf32=False, precision=["bf16"])  # 687 TFLOP/s: over TF32, under BF16
    assert bf16.status == "ok" and bf16.roofline.floor_rate == "bfloat16"
    assert _judge(200.0, None, allow_tf32=False, precision=["approx"]).roofline.floor_rate == "float32_cuda_cores"


def test_the_implausible_reason_never_quotes_the_floor():
    """The model reads the reason: the floor's figure would tell it how far to pad. The figure stays in
    the roofline, which the model is not shown."""
    out = _judge(1000.0, measured(), allow_tf32=False)
    assert out.status == "implausible" and out.roofline.floor_us == pytest.approx(2051.3, abs=0.1)
    assert "2051" not in out.reason and "floor for the precision the experiment allows" in out.reason
    assert out.reason.startswith("median 1000.000 us is below the speed-of-light floor")


def test_the_floor_uses_the_case_scalars():
    # the declared work is resolved from the case's own scalars: 16^3 flops in 1000 us is plausible,
    # 4096^3 in 1 us is not
    assert _judge(1000.0, None, scalars={"m": 16, "n": 16, "k": 16}).status == "ok"
    assert _judge(1.0, None).status == "implausible"
