"""A PyTorch reference: the user's function called on torch tensors, on the worker's GPU.

The function (named like the kernel, or ``reference_entry``) takes every input tensor and scalar
as keyword arguments, by their names in the signature, and returns the output tensor (one output),
a sequence of them in signature order, or a dict of name to tensor. Its inputs are copies of the
harness's pristine input sets, made for the call: it never sees a buffer a candidate writes,
and nothing it does to them reaches the harness. bfloat16 arrives as torch bfloat16.

It runs with deterministic settings: TF32 off for float32 products unless the experiment allows
it, cuDNN deterministic and not benchmarking, the deterministic-algorithm switch on (warnings
only, so an operation without a deterministic kernel still runs). The settings are restored after
the call, so a vendor baseline in the same worker keeps its own. torch is imported here only, and
only when a request has a PyTorch reference: the harness itself does not need it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import numpy as np

from ..wire.precision import allowed_math
from ..wire.signature import Signature
from .reference import ReferenceFailure, reference_outputs


def import_torch():
    try:
        import torch
    except ImportError as exc:
        raise ReferenceFailure(f"the reference uses PyTorch, which this worker cannot import ({exc}): "
                               "pip install -e '.[torch]' in cudaopt's checkout") from None
    return torch


@contextmanager
def deterministic(torch, allow_tf32: bool) -> Iterator[None]:
    """TF32 off unless allowed, deterministic algorithms, for the duration; the previous settings after."""
    cuda, cudnn = torch.backends.cuda.matmul, torch.backends.cudnn
    saved = (cuda.allow_tf32, cudnn.allow_tf32, cudnn.deterministic, cudnn.benchmark,
             torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled())
    cuda.allow_tf32 = cudnn.allow_tf32 = allow_tf32
    cudnn.deterministic, cudnn.benchmark = True, False
    torch.use_deterministic_algorithms(True, warn_only=True)
    try:
        yield
    finally:
        cuda.allow_tf32, cudnn.allow_tf32, cudnn.deterministic, cudnn.benchmark = saved[:4]
        torch.use_deterministic_algorithms(saved[4], warn_only=saved[5])


def call_torch(torch, fn: Callable, signature: Signature, tensors: dict, scalars: dict,
               output_shapes: dict[str, tuple[int, ...]], allow_tf32: bool, scrub: bool = False) -> dict:
    """Call the reference; its outputs as contiguous float64 tensors of the case's shapes, on the
    inputs' device. ``tensors`` are the caller's copies of the inputs (the function may change them).
    ``scrub``: zero what the function returned once it is copied (it holds the answer)."""
    kwargs = {a.name: tensors[a.name] if a.pointer else scalars[a.name]
              for a in signature.args if a.is_input or not a.pointer}
    device = next(iter(tensors.values())).device if tensors else None
    try:
        with deterministic(torch, allow_tf32), torch.no_grad():
            result = fn(**kwargs)
    except ReferenceFailure:
        raise
    except Exception as exc:
        raise ReferenceFailure(f"reference function raised {exc.__class__.__name__}: "
                               f"{' '.join(str(exc).split())}") from None
    names = [a.name for a in signature.outputs]
    outputs = reference_outputs(result, names)
    checked = {}
    for name in names:
        value = outputs[name]
        if not isinstance(value, torch.Tensor):
            raise ReferenceFailure(f"reference output {name!r} is a {type(value).__name__}, not a torch tensor")
        if value.is_complex():
            raise ReferenceFailure(f"reference output {name!r} is complex ({value.dtype})")
        shape = output_shapes[name]
        if tuple(value.shape) != shape:
            if value.numel() != int(np.prod(shape, dtype=np.int64)):
                raise ReferenceFailure(f"reference output {name!r} has shape {tuple(value.shape)}, "
                                       f"the case says {shape}")
            value = value.reshape(shape)
        checked[name] = value.detach().to(device=device, dtype=torch.float64, copy=True).contiguous()
        if scrub:
            _zero(outputs[name])
    return checked


def _zero(tensor) -> None:
    try:
        tensor.detach().zero_()
    except RuntimeError:  # a broadcast view cannot be written; its memory is an input copy's or is freed
        pass


class TorchReference:
    """The PyTorch reference in the worker, loaded once per source (a model it builds is kept).

    Each call copies its inputs from device ranges (a pristine input set, or the fresh inputs the
    harness just drew) into tensors of its own, on the harness's stream; its outputs are copied,
    widened to float64, into harness memory (:class:`answers.DeviceAnswer`, which the caller
    locks or scrubs). Everything of torch's that held an answer is then zeroed, and torch's cache
    emptied, so no candidate kernel finds a reference value in pool memory.
    """

    def __init__(self, gpu):
        self.gpu = gpu
        self._torch = None
        self._functions: dict[tuple, Callable] = {}

    @property
    def torch(self):
        if self._torch is None:
            self._torch = import_torch()
        return self._torch

    def function(self, ref) -> Callable:
        from .reference import load_python

        key = (ref.source, ref.path, ref.entry)
        if key not in self._functions:
            self._functions[key] = load_python(ref.source, ref.path, ref.entry)
        return self._functions[key]

    def run(self, req, signature: Signature, scalars: dict, buffers, input_set: int | None = None) -> dict:
        """The request's reference on input set ``input_set``'s pristine device copy, or (None) on
        the fresh inputs in the working buffers (``buffers``: the case's ``CaseBuffers``)."""
        from .answers import DeviceAnswer
        from .arrays import torch_view

        torch, gpu = self.torch, self.gpu
        fn = self.function(req.reference)
        inputs, output_shapes = buffers.ranges(input_set), buffers.output_shapes
        allow_tf32 = "tf32" in allowed_math(req.limits, signature)
        answers: dict[str, DeviceAnswer] = {}
        with torch.cuda.stream(torch.cuda.ExternalStream(int(gpu.stream.handle))):
            copies = {a.name: torch_view(torch, inputs[a.name][0], inputs[a.name][1], a.dtype).clone()
                      for a in signature.inputs}
            values = {}
            try:
                values = call_torch(torch, fn, signature, copies, scalars, output_shapes, allow_tf32, scrub=True)
                for name, value in values.items():
                    answers[name] = DeviceAnswer(gpu, gpu.alloc(8 * value.numel()), tuple(value.shape))
                    gpu.copy_async(answers[name].ptr, value.data_ptr(), 8 * value.numel())
            except BaseException:
                for answer in answers.values():
                    answer.scrub()
                raise
            finally:
                for value in [*values.values(), *copies.values()]:
                    value.zero_()
                del values, copies
        gpu.stream.sync()
        torch.cuda.empty_cache()
        return answers
