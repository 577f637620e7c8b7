"""A pool of one fake GPU that runs the real harness on the CPU: each request goes through the
worker's Runner on tests/fake_device.py's FakeDevice, kernels compiled by NVRTC as for a GPU and
run as NumPy functions registered by entry name (what the kernel computes, written again in
Python), a PyTorch reference called on CPU tensors. The vendors are not run (they need a GPU):
each is reported at ``VENDOR`` x the kernel's median, as a scripted GPU reports them.

What the docs' examples and the Python-first tests run on, so that the API and the harness are
exercised end to end without a GPU.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from cudaopt.worker.answers import DeviceAnswer
from cudaopt.worker.reference import load_python
from cudaopt.worker.runner import Runner
from cudaopt.worker.torch_reference import call_torch
from cudaopt.pool.dispatch import GpuRef, dispatch
from cudaopt.wire import expr
from cudaopt.wire.results import DeviceInfo, EvalResult, VendorResult
from cudaopt.wire.signature import DTYPES, parse_signature
from tests.fake_device import FakeDevice
from tests.scripted import stats

VENDOR = 1.5  # a vendor's median, as a multiple of the kernel's on the same case


class CpuTorchReference:
    """The worker's PyTorch reference, on CPU tensors read from the fake device's memory."""

    def __init__(self, device: FakeDevice):
        self.device = device

    def run(self, req, signature, scalars: dict, buffers, input_set: int | None = None) -> dict:
        import torch

        fn = load_python(req.reference.source, req.reference.path, req.reference.entry)
        ranges = buffers.ranges(input_set)
        tensors = {a.name: torch.from_numpy(self.device.view(ranges[a.name][0], DTYPES[a.dtype].numpy,
                                                             math.prod(ranges[a.name][1]))
                                            .reshape(ranges[a.name][1]).copy())
                   for a in signature.inputs}
        values = call_torch(torch, fn, signature, tensors, scalars, buffers.output_shapes, req.limits.allow_tf32)
        return {name: DeviceAnswer.upload(self.device, value.numpy()) for name, value in values.items()}


class FakePool:
    """One fake GPU as an Evaluator: ``kernels`` maps an entry name to what it computes, a function
    taking the inputs (NumPy arrays) and scalars by name and returning the outputs by name."""

    backend = "fake"

    def __init__(self, kernels: dict[str, Callable[..., dict]], duration_ms: float = 0.01):
        self.kernels = kernels
        self.duration_ms = duration_ms
        self.notices: list[str] = []
        self.requests = []

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        return None

    def device_info(self) -> DeviceInfo:
        return DeviceInfo(name="CPU fake", arch="sm_90", sm_count=132, pci_bus_id="fake:0")

    def gpus(self) -> list[GpuRef]:
        return [GpuRef.of(self.device_info(), 0)]

    @property
    def ref(self) -> GpuRef:
        return self.gpus()[0]

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def prefetch(self, kernels) -> None:
        pass  # the fake device compiles nothing

    def compile_ahead(self, kernels) -> None:
        pass

    def evaluate_all(self, requests, **options):
        return dispatch([self], requests, **options)

    def evaluate(self, request, on_event=None) -> EvalResult:
        self.requests.append(request)
        device = FakeDevice()
        signature = parse_signature(request.signature)
        for name, compute in self.kernels.items():
            device.kernel(name, _body(signature, request.cases[0], compute), [8 if a.pointer else 4
                                                                             for a in signature.args],
                          self.duration_ms)
        runner = Runner(device, on_event=on_event or (lambda event: None))
        runner.torch_reference = CpuTorchReference(device)
        result = runner.evaluate(request.model_copy(update={"vendors": []}))
        for case in result.cases:
            if case.timing is not None:
                case.vendors = [VendorResult(label=v.label, status="ok", timing=stats(case.timing.median_us * VENDOR))
                                for v in request.vendors]
        result.device = self.device_info()
        return result


def _body(signature, case, compute: Callable[..., dict]):
    """A fake kernel: reads its inputs by the case's shape expressions, writes what ``compute`` returns."""
    specs = {**case.inputs, **case.outputs}

    def run(dev, launch, *args):
        values = dict(zip((a.name for a in signature.args), args, strict=True))
        scalars = {a.name: values[a.name].item() if hasattr(values[a.name], 'item') else values[a.name]
                   for a in signature.scalars}

        def array(arg):
            count = math.prod(int(expr.evaluate(str(d), scalars)) for d in specs[arg.name].shape)
            return dev.view(values[arg.name], DTYPES[arg.dtype].numpy, count)

        given = {a.name: array(a) for a in signature.inputs}
        out = compute(**given, **scalars)
        for arg in signature.outputs:
            array(arg)[:] = np.asarray(out[arg.name], dtype=DTYPES[arg.dtype].numpy).reshape(-1)

    return run
