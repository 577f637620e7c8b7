"""The vendor baseline inside the worker: the user's library call, over the harness's own buffers.

The function gets every signature argument as a keyword, by its name: pointer arguments as
device arrays that wrap the case's working buffers without a copy (cupy arrays, or torch tensors
with ``arrays: "torch"``), scalars as numbers. It writes its results into the output arrays in
place. It runs with the harness's stream as the current stream, so its launches queue behind the
timing gate and between the timing events, exactly like a candidate's launch.

cupy or torch is imported here, and only when a request names a vendor, so the worker itself
needs only numpy and cuda-core. TF32 is turned off for float32 matrix products unless the
experiment allows it.
"""

from __future__ import annotations

import os
import types
from collections.abc import Callable

import numpy as np

from .protocol import VendorSpec
from .signature import DTYPES, Signature


class VendorError(RuntimeError):
    """The vendor cannot run here (library missing, bad source): reported, never the candidate's fault."""


class _DeviceRange:
    """A device range described by ``__cuda_array_interface__``, which cupy and torch wrap in place."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "strides": None, "version": 3, "stream": None}


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
        return BoundVendor(self, kwargs)

    def _array(self, ptr: int, shape: tuple[int, ...], dtype: str):
        typestr = np.dtype(DTYPES[dtype].numpy).str  # bfloat16: its uint16 bits
        if self.spec.arrays == "cupy":
            return self.lib.asarray(_DeviceRange(ptr, shape, typestr))
        if dtype == "bfloat16":
            return self.lib.as_tensor(_DeviceRange(ptr, shape, "<i2"), device="cuda").view(self.lib.bfloat16)
        return self.lib.as_tensor(_DeviceRange(ptr, shape, typestr), device="cuda")

    def on_stream(self):
        """A context in which the library's current stream is the harness's stream."""
        return self.stream if self.spec.arrays == "cupy" else self.lib.cuda.stream(self.stream)


class BoundVendor:
    """The vendor over one case's buffers. The first failure is kept in ``error`` and later calls
    do nothing, so that samples already queued behind the timing gate can drain."""

    def __init__(self, vendor: Vendor, kwargs: dict):
        self.vendor, self.kwargs, self.error = vendor, kwargs, ""

    def __call__(self) -> None:
        if self.error:
            return
        try:
            with self.vendor.on_stream():
                self.vendor.fn(**self.kwargs)
        except Exception as exc:
            self.error = f"{self.vendor.label}: {exc.__class__.__name__}: {' '.join(str(exc).split())}"


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
        package = "cupy-cuda13x" if arrays == "cupy" else "torch"
        raise VendorError(f"the vendor baseline needs {arrays} ({exc}): pip install {package}") from None
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
