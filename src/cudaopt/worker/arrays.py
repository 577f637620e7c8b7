"""Device ranges that cupy and torch wrap in place, through ``__cuda_array_interface__``.

The vendor baseline gets the harness's own working buffers this way (no copy), and the PyTorch
reference copies of the pristine input sets (its own tensors, never a view of a buffer a
candidate touches).
"""

from __future__ import annotations

import numpy as np

from ..wire.signature import DTYPES


class DeviceRange:
    """A device range described by ``__cuda_array_interface__``."""

    def __init__(self, ptr: int, shape: tuple[int, ...], typestr: str):
        self.__cuda_array_interface__ = {"shape": tuple(shape), "typestr": typestr, "data": (ptr, False),
                                         "strides": None, "version": 3, "stream": None}


def typestr(dtype: str) -> str:
    """The array-interface type of a signature element type (bfloat16: its 16 bits)."""
    return np.dtype(DTYPES[dtype].numpy).str


def torch_view(torch, ptr: int, shape: tuple[int, ...], dtype: str):
    """A torch tensor over ``shape`` elements of ``dtype`` at ``ptr``, sharing the memory."""
    if dtype == "bfloat16":
        return torch.as_tensor(DeviceRange(ptr, shape, "<i2"), device="cuda").view(torch.bfloat16)
    return torch.as_tensor(DeviceRange(ptr, shape, typestr(dtype)), device="cuda")
