"""Which GPUs a command uses: ``--device N``, ``--devices all|0,1,...`` or ``--ray ADDRESS``.

Ordinals are those of the machine (a worker is started with ``CUDA_VISIBLE_DEVICES`` set to
its ordinal). ``all`` is every GPU this process may use: the ordinals ``CUDA_VISIBLE_DEVICES``
lists when it is set (a scheduler's allocation), else every GPU the driver counts. On a Ray
cluster the cluster places the workers, one per free GPU, so only ``all`` applies there.
"""

from __future__ import annotations

import os

from ..errors import ExperimentError
from .dispatch import WorkerError

ALL = "all"


def parse_devices(text: str) -> list[int] | None:
    """``--devices``: None for ``all``, else the ordinals (each once)."""
    text = text.strip()
    if text == ALL:
        return None
    parts = [p.strip() for p in text.split(",")]
    if not parts or not all(p.isdigit() for p in parts):
        raise ExperimentError("--devices", "", f"{text!r} is neither {ALL} nor GPU ordinals such as 0,1")
    ordinals = [int(p) for p in parts]
    repeated = sorted({d for d in ordinals if ordinals.count(d) > 1})
    if repeated:
        raise ExperimentError("--devices", "", f"GPU {repeated[0]} named twice: one worker per GPU keeps timings "
                                               "honest (two timed kernels never share a GPU)")
    return ordinals


def choose(device: int | None, devices: str | None, ray: str | None) -> list[int] | None:
    """The ordinals a command was given (None: all of them), from its three options."""
    if device is not None and devices is not None:
        raise ExperimentError("--device", "", "give --device N or --devices LIST, not both")
    if ray is not None:
        if device is not None or (devices is not None and devices.strip() != ALL):
            raise ExperimentError("--ray", "", "the cluster places the workers (one per free GPU): "
                                               f"--device and --devices other than {ALL} do not apply")
        return None
    if devices is not None:
        return parse_devices(devices)
    return [device if device is not None else 0]


def visible_devices() -> list[int]:
    """Every GPU this process may use (``all``)."""
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    if listed is not None:
        parts = [p.strip() for p in listed.split(",") if p.strip()]
        if not all(p.isdigit() for p in parts):
            raise ExperimentError("CUDA_VISIBLE_DEVICES", "", f"{listed!r} names GPUs by UUID; --devices all needs "
                                                              "ordinals: give --devices 0,1,... instead")
        if not parts:
            raise WorkerError("no GPU: CUDA_VISIBLE_DEVICES is empty")
        return [int(p) for p in parts]
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        err2, count = driver.cuDeviceGetCount()
        ok = err == driver.CUresult.CUDA_SUCCESS and err2 == driver.CUresult.CUDA_SUCCESS
    except Exception as exc:
        raise WorkerError(f"no GPU: the CUDA driver cannot be asked ({exc.__class__.__name__}: {exc})") from None
    if not ok or count == 0:
        raise WorkerError(f"no GPU: the CUDA driver reports none ({err if not ok else 'count 0'})")
    return list(range(count))
