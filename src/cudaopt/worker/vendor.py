"""The vendor baseline inside the worker: the user's library call, over the harness's own buffers.

The function gets every signature argument as a keyword, by its name: pointer arguments as
device arrays that wrap the case's working buffers without a copy (cupy arrays, or torch tensors
with ``arrays: "torch"``), scalars as numbers. It writes its results into the output arrays in
place, or (``returns``) returns them: the harness then copies them into the outputs after the
call, outside any timed interval, before they are checked (a returned array is what PyTorch
eager and ``torch.compile`` produce; copying it inside the timing would charge the vendor for a
copy the candidate never makes). It runs with the harness's stream as the current stream, so its
launches queue behind the timing gate and between the timing events, exactly like a candidate's.

cupy or torch is imported here, and only when a request names a vendor, so the worker itself
needs only numpy and cuda-core. TF32 is turned off for float32 matrix products unless the
experiment allows it.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable

import numpy as np

from ..wire.protocol import VendorSpec
from ..wire.signature import Signature
from .arrays import DeviceRange, torch_view, typestr
from .reference import named_outputs


class VendorError(RuntimeError):
    """The vendor cannot run here (library missing, bad source): reported, never the candidate's fault."""


class Vendor:
    """A loaded vendor function with its array library set up; ``bind`` points it at one case."""

    def __init__(self, spec: VendorSpec, stream_handle: int):
        self.spec = spec
        self.label = spec.label or spec.entry
        self.lib = _library(spec.arrays, spec.allow_tf32)
        self.fn = _load(spec)
        self.stream = self.lib.cuda.ExternalStream(stream_handle)

    def bind(self, signature: Signature, pointers: dict[str, tuple[int, tuple[int, ...]]],
             scalars: dict) -> BoundVendor:
        """The call over one case: ``pointers`` maps each pointer argument to (address, shape)."""
        kwargs = {}
        for arg in signature.args:
            if arg.pointer:
                ptr, shape = pointers[arg.name]
                kwargs[arg.name] = self._array(ptr, shape, arg.dtype)
            else:
                kwargs[arg.name] = scalars[arg.name]
        return BoundVendor(self, kwargs, [a.name for a in signature.outputs])

    def _array(self, ptr: int, shape: tuple[int, ...], dtype: str):
        if self.spec.arrays == "cupy":
            return self.lib.asarray(DeviceRange(ptr, shape, typestr(dtype)))  # bfloat16: its uint16 bits
        return torch_view(self.lib, ptr, shape, dtype)

    def on_stream(self):
        """A context in which the library's current stream is the harness's stream."""
        return self.stream if self.spec.arrays == "cupy" else self.lib.cuda.stream(self.stream)

    def release(self) -> None:
        """Give the library's cached free blocks back to the driver (the stream has drained): what
        the vendor computed on a checked input set is then unmapped, out of any kernel's reach."""
        if self.spec.arrays == "cupy":
            self.lib.get_default_memory_pool().free_all_blocks()
        else:
            self.lib.cuda.empty_cache()


class BoundVendor:
    """The vendor over one case's buffers. The first failure is kept in ``error`` and later calls
    do nothing, so that samples already queued behind the timing gate can drain. With
    ``returns``, the last call's result is kept until :meth:`deliver` copies it into the outputs
    (and zeroes it: a vendor's result is an answer, and must not linger in the library's pool)."""

    def __init__(self, vendor: Vendor, kwargs: dict, outputs: list[str]):
        self.vendor, self.kwargs, self.outputs, self.error = vendor, kwargs, outputs, ""
        self.returned = None

    @property
    def label(self) -> str:
        return self.vendor.label

    def __call__(self) -> None:
        if self.error:
            return
        try:
            with self.vendor.on_stream():
                result = self.vendor.fn(**self.kwargs)
            self.returned = result if self.vendor.spec.returns else None
        except Exception as exc:
            self._fail(exc)

    def deliver(self) -> None:
        """Copy a returned result into the output arrays (stream-ordered), then zero it."""
        result, self.returned = self.returned, None
        if not self.vendor.spec.returns or self.error:
            return
        try:
            if result is None:
                raise ValueError("returned nothing (a vendor with returns: true returns its outputs)")
            values = named_outputs(result, self.outputs)
            with self.vendor.on_stream():
                for name, value in values.items():
                    out = self.kwargs[name]
                    if tuple(value.shape) != tuple(out.shape):
                        if int(np.prod(value.shape, dtype=np.int64)) != int(np.prod(out.shape, dtype=np.int64)):
                            raise ValueError(f"returned {name!r} with shape {tuple(value.shape)}, the case says "
                                             f"{tuple(out.shape)}")
                        value = value.reshape(out.shape)
                    out[...] = value
                    if not any(_overlaps(value, array) for array in self.kwargs.values()):
                        value[...] = 0  # the library's own memory, not a harness buffer
        except Exception as exc:
            self._fail(exc)

    def _fail(self, exc: Exception) -> None:
        self.error = f"{self.vendor.label}: {exc.__class__.__name__}: {' '.join(str(exc).split())}"


def _overlaps(a, b) -> bool:
    """Whether two device arrays share memory (both describe themselves by the array interface)."""
    try:
        ra, rb = _extent(a), _extent(b)
    except (AttributeError, KeyError, TypeError):
        return False
    return ra[0] < rb[1] and rb[0] < ra[1]


def _extent(array) -> tuple[int, int]:
    info = array.__cuda_array_interface__
    start = int(info["data"][0])
    return start, start + max(1, int(array.nbytes))


def _library(arrays: str, allow_tf32: bool):
    """cupy or torch, with TF32 for float32 matrix products off unless allowed."""
    try:
        if arrays == "cupy":
            os.environ["CUPY_TF32"] = "1" if allow_tf32 else "0"  # read at cupy's first float32 product
            import cupy
            from cupy._core import _routines_linalg as linalg

            # the setting itself, for a worker that already ran a product under the other one
            linalg.set_compute_type(np.float32, linalg.COMPUTE_TYPE_TF32 if allow_tf32 else linalg.COMPUTE_TYPE_DEFAULT)
            return cupy
        import torch

        torch.backends.cuda.matmul.allow_tf32 = allow_tf32
        torch.backends.cudnn.allow_tf32 = allow_tf32
        return torch
    except ImportError as exc:
        how = "pip install cupy-cuda13x" if arrays == "cupy" else "pip install -e '.[torch]' in cudaopt's checkout"
        raise VendorError(f"the vendor baseline needs {arrays} ({exc}): {how}") from None
    except Exception as exc:
        raise VendorError(f"cannot set up {arrays}: {exc.__class__.__name__}: {exc}") from None


def _load(spec: VendorSpec) -> Callable:
    module = types.ModuleType("cudaopt_vendor")
    module.__file__ = spec.path
    try:
        exec(compile(spec.source, spec.path or "<vendor>", "exec"), module.__dict__)  # the user's own code
    except Exception as exc:
        raise VendorError(f"vendor {spec.path}: {exc.__class__.__name__}: {exc}") from None
    fn = module.__dict__.get(spec.entry)
    if not callable(fn):
        raise VendorError(f"vendor {spec.path}: no function named {spec.entry!r}")
    return fn
