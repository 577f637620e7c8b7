"""The PyTorch reference's calling convention and settings, vendors that return their outputs, and
several vendors' chunks interleaved with the candidate's (no GPU: torch on the CPU, a stand-in GPU)."""

from __future__ import annotations

import json
from contextlib import nullcontext
from types import SimpleNamespace

import numpy as np
import pytest
from typer.testing import CliRunner

from cudaopt.cli import app
from cudaopt.worker.reference import ReferenceFailure
from cudaopt.worker.timing import VENDOR_LAUNCHES, TimedRun
from cudaopt.worker.vendor import BoundVendor
from cudaopt.wire.protocol import EvalRequest, TimingProtocol, VendorSpec
from cudaopt.wire.results import CaseResult
from cudaopt.wire.signature import parse_signature
from tests.conftest import SGEMM, optional

runner = CliRunner(env={"COLUMNS": "200"})
SIGNATURE = json.loads((SGEMM / "experiment.json").read_text())["signature"]
SIG = parse_signature(SIGNATURE)
SHAPES = {"c": (2, 3)}


def torch_flags(tmp_path, source: str) -> list[str]:
    ref = tmp_path / "reference.py"
    ref.write_text(source)
    return ["--signature", SIGNATURE, "--reference", str(ref), "--input-cases", str(SGEMM / "input_cases.json")]


# --- the PyTorch reference -------------------------------------------------------------------


def test_a_torch_reference_is_detected_checked_on_the_cpu_and_its_failures_are_one_line(tmp_path):
    optional("torch")
    good = "import torch\n\ndef matmul_f32(a, b, *, m, n, k):\n    return a.double() @ b.double()\n"
    result = runner.invoke(app, ["check", *torch_flags(tmp_path, good), "--arch", "sm_90"])
    assert result.exit_code == 0, result.output
    assert "reference.py (PyTorch) ran on case 'odd-31x37x29' on the CPU" in result.output
    bad = good.replace("a.double() @ b.double()", "a.double()")
    result = runner.invoke(app, ["check", *torch_flags(tmp_path, bad)])
    assert result.exit_code == 2
    assert "reference: on case 'odd-31x37x29': reference output 'c' has shape (31, 29), the case says (31, 37)" \
        in result.output


def test_without_torch_the_check_says_the_reference_was_not_run(tmp_path, monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "torch" else real(name, *a))
    source = "import torch\n\ndef matmul_f32(a, b, *, m, n, k):\n    return a @ b\n"
    result = runner.invoke(app, ["check", *torch_flags(tmp_path, source), "--arch", "sm_90"])
    assert result.exit_code == 0, result.output
    assert "a PyTorch reference, not run: torch is not installed here" in result.output


def test_reference_kind_in_the_config_overrides_the_detection(example):
    folder, edit = example
    (folder / "ref.py").write_text("import numpy as np\n\ndef matmul_f32(a, b, m, n, k):\n    return a @ b\n")
    edit("experiment.json", lambda d: d.update(reference="ref.py"))
    from cudaopt.experiment import load_experiment

    assert load_experiment(folder / "experiment.json").reference_kind == "py"
    edit("experiment.json", lambda d: d.update(reference_kind="torch"))
    assert load_experiment(folder / "experiment.json").reference_spec().kind == "torch"
    edit("experiment.json", lambda d: d.update(reference="reference.cu"))
    from cudaopt.errors import ExperimentError

    with pytest.raises(ExperimentError, match="reference_kind: 'torch' is for a .py reference"):
        load_experiment(folder / "experiment.json")


def test_call_torch_returns_float64_of_the_case_shapes_and_restores_the_settings():
    torch = optional("torch")
    from cudaopt.worker.torch_reference import call_torch

    before = (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
              torch.are_deterministic_algorithms_enabled())
    seen = {}

    def reference(a, b, *, m, n, k):
        seen.update(tf32=(torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32),
                    deterministic=torch.are_deterministic_algorithms_enabled(), grad=torch.is_grad_enabled())
        a.zero_()  # its inputs are its own
        return (b[:2, :3] * 2).reshape(-1)  # flat: reshaped to the case's shape

    a, b = torch.ones(2, 4), torch.arange(12.0).reshape(4, 3)
    out = call_torch(torch, reference, SIG, {"a": a, "b": b}, {"m": 2, "n": 3, "k": 4}, SHAPES, allow_tf32=False)
    assert out["c"].dtype == torch.float64 and tuple(out["c"].shape) == (2, 3)
    assert out["c"].tolist() == [[0, 2, 4], [6, 8, 10]]
    assert seen == {"tf32": (False, False), "deterministic": True, "grad": False}
    assert (torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32,
            torch.are_deterministic_algorithms_enabled()) == before
    call_torch(torch, reference, SIG, {"a": a, "b": b}, {"m": 2, "n": 3, "k": 4}, SHAPES, allow_tf32=True)
    assert seen["tf32"] == (True, True)


def test_call_torch_scrubs_what_it_returned_once_copied():
    torch = optional("torch")
    from cudaopt.worker.torch_reference import call_torch

    kept = {}

    def reference(a, b, *, m, n, k):
        kept["c"] = torch.full((2, 3), 7.0)
        return kept["c"]

    out = call_torch(torch, reference, SIG, {"a": torch.ones(1), "b": torch.ones(1)}, {"m": 2, "n": 3, "k": 4},
                     SHAPES, allow_tf32=False, scrub=True)
    assert out["c"].eq(7).all() and kept["c"].eq(0).all()  # the answer survives, the returned tensor does not


@pytest.mark.parametrize("body, message", [
    ("return 1.5", "reference output 'c' is a float, not a torch tensor"),
    ("return torch.ones(5)", "reference output 'c' has shape (5,), the case says (2, 3)"),
    ("return {'d': torch.ones(2, 3)}", "reference returned no output 'c'"),
    ("return torch.ones(2, 3, dtype=torch.complex64)", "reference output 'c' is complex"),
    ("raise ValueError('no\\n today')", "reference function raised ValueError: no today"),
])
def test_call_torch_failures_are_reference_errors(body, message):
    torch = optional("torch")
    from cudaopt.worker.torch_reference import call_torch

    namespace = {"torch": torch}
    exec(f"def reference(a, b, *, m, n, k):\n    {body}\n", namespace)
    with pytest.raises(ReferenceFailure, match=message.replace("(", r"\(").replace(")", r"\)")):
        call_torch(torch, namespace["reference"], SIG, {"a": torch.ones(1), "b": torch.ones(1)},
                   {"m": 2, "n": 3, "k": 4}, SHAPES, allow_tf32=False)


# --- vendors that return their outputs ---------------------------------------------------------


def bound(fn, returns=True, outputs=("c",)):
    spec = VendorSpec(source="", entry="f", label="lib", returns=returns)
    vendor = SimpleNamespace(spec=spec, label="lib", fn=fn, on_stream=nullcontext)
    kwargs = {"a": np.ones((2, 2)), "c": np.full((2, 2), np.nan)}
    return BoundVendor(vendor, kwargs, list(outputs)), kwargs


def test_a_returned_result_is_copied_into_the_outputs_and_then_zeroed():
    result = np.arange(4.0)
    vendor, kwargs = bound(lambda a, c: result)
    vendor()
    assert np.isnan(kwargs["c"]).all()  # nothing written by the call itself
    vendor.deliver()
    assert kwargs["c"].tolist() == [[0, 1], [2, 3]] and not result.any() and vendor.error == ""


@pytest.mark.parametrize("fn, message", [
    (lambda a, c: None, "returned nothing"),
    (lambda a, c: np.ones(3), "returned 'c' with shape (3,), the case says (2, 2)"),
    (lambda a, c: (np.ones(4), np.ones(4)), "returned 2 values for the outputs ['c']"),
])
def test_a_returned_result_that_does_not_fit_is_the_vendors_error(fn, message):
    vendor, kwargs = bound(fn)
    vendor()
    vendor.deliver()
    assert vendor.error.startswith("lib: ValueError: ") and message in vendor.error, vendor.error
    assert np.isnan(kwargs["c"]).all()


def test_an_in_place_vendor_is_left_alone_by_deliver():
    def fn(a, c):
        c[...] = 5

    vendor, kwargs = bound(fn, returns=False)
    vendor()
    vendor.deliver()
    assert (kwargs["c"] == 5).all() and vendor.error == ""


# --- several vendors, interleaved ------------------------------------------------------------------


class StandInGpu:
    """Records what the timed run queues: which run, on which stream's fresh inputs, behind which gate."""

    def __init__(self):
        self.log: list[tuple] = []
        self.clock = 0.0
        self.stream = SimpleNamespace()

    def record_event(self):
        self.clock += 1.0
        return self.clock

    def alloc(self, nbytes):
        return SimpleNamespace(handle=0, close=lambda stream: None)

    def fill_async(self, *args):
        pass

    def flush_l2(self):
        pass

    def close_gate(self):
        self.log.append(("gate",))

    def open_gate(self):
        pass

    def gate_timed_out(self):
        return False


class StandInBuffers:
    def __init__(self, gpu):
        self.gpu = gpu

    def ensure_slots(self, count):
        pass

    def slot_table(self):
        return 0, 0, 0

    def stage_fresh(self, seed, stream):
        self.gpu.log.append(("inputs", stream))

    def scan_launch(self, *args, **kwargs):
        pass

    def save_outputs(self, slot, key, digest):
        pass

    def allocations(self):
        return [(256, 1024)]


class StandInLeftovers:
    """Logs each poison of the SMs; the L2 demotion is a no-op here."""

    def __init__(self, gpu):
        self.gpu = gpu

    def poison(self):
        self.gpu.log.append(("poison",))

    def range_table(self, ranges):
        return SimpleNamespace(close=lambda stream: None), len(ranges)

    def demote_l2(self, table):
        pass


def timed_run(candidate: bool, vendors: int, failing: int | None = None):
    gpu = StandInGpu()
    run = TimedRun(gpu, SimpleNamespace(sync=lambda: None), StandInLeftovers(gpu), StandInBuffers(gpu),
                   TimingProtocol(warmup=1, iterations=4, chunk=2, checked_launches=1), 7, "case")

    def runner_for(name):
        def call():
            gpu.log.append(("run", name))
            call.calls += 1
            if name == f"v{failing}" and call.calls == 2:  # fails in its first timed chunk
                call.error = "broken"
        call.error, call.calls = "", 0
        return call

    timings = run.run(runner_for("kernel") if candidate else None, [runner_for(f"v{i}") for i in range(vendors)])
    return gpu.log, timings


def test_each_vendors_chunk_comes_before_the_candidates_each_on_fresh_inputs_of_its_own():
    log, timings = timed_run(candidate=True, vendors=2)
    runs = [entry[1] for entry in log if entry[0] == "run"]
    assert runs[:3] == ["v0", "v1", "kernel"]  # warm-ups
    assert runs[3:] == ["v0", "v0", "v1", "v1", "kernel", "kernel"] * 2  # chunks of 2, interleaved
    streams = {}
    for previous, entry in zip(log, log[1:], strict=False):
        if entry[0] == "run" and previous[0] == "inputs":
            streams.setdefault(entry[1], []).append(previous[1])
    kernel, v0, v1 = streams["kernel"], streams["v0"], streams["v1"]
    # the candidate's inputs are named by its launch numbers, its checked launch (2) like the others
    assert kernel == [0, 1, 2, 3, 4] and not set(kernel) & set(v0) and not set(v0) & set(v1)
    assert all(s >= VENDOR_LAUNCHES for s in v0 + v1)
    assert len(timings.candidate) == 4 and [len(v) for v in timings.vendors] == [4, 4]
    assert set(timings.gate_timeouts) == {"candidate", "vendor 0", "vendor 1"}
    # every launch, warm-up or timed, follows a poison of the SMs' shared memory and registers
    assert all(previous == ("poison",) for previous, entry in zip(log, log[1:], strict=False) if entry[0] == "inputs")
    assert sum(entry == ("poison",) for entry in log) == len(runs)


def test_without_a_candidate_only_the_vendors_run_and_a_failing_one_stops():
    log, timings = timed_run(candidate=False, vendors=2, failing=0)
    runs = [entry[1] for entry in log if entry[0] == "run"]
    assert "kernel" not in runs and timings.candidate == []
    assert runs.count("v0") == 1 + 2  # its warm-up, then the first chunk; dropped after it failed
    assert runs.count("v1") == 1 + 4 and len(timings.vendors[1]) == 4


# --- the wire: one vendor, as written before vendors became a list --------------------------------


def test_requests_and_results_with_one_vendor_still_read(sgemm):
    request = json.loads(sgemm.request("src", vendor=True).to_json())
    vendor = request.pop("vendors")[0]
    old = EvalRequest.model_validate({**request, "vendor": vendor})
    assert [v.label for v in old.vendors] == ["cuBLAS SGEMM (cupy)"]
    assert EvalRequest.model_validate({**request, "vendor": None}).vendors == []
    case = CaseResult.model_validate({"name": "a", "role": "performance", "status": "ok",
                                      "vendor": {"label": "cuBLAS", "status": "error", "reason": "no cupy"}})
    assert case.vendors[0].reason == "no cupy" and case.vendor_median_us() is None
    assert CaseResult.model_validate({"name": "a", "role": "performance", "status": "ok", "vendor": None}).vendors == []
