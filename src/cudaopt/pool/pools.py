"""Opening the pool of GPU workers a command evaluates on: this machine's, or a Ray cluster's."""

from __future__ import annotations

from pathlib import Path

from .dispatch import Dispatcher
from .supervisor import Supervisor
from .ray_cluster import RayPool
from .devices import visible_devices


def open_pool(devices: list[int] | None, ray: str | None = None, log_dir: Path | None = None) -> Dispatcher:
    """Workers on ``devices`` of this machine (None: every GPU it may use), or on the Ray cluster
    at ``ray`` (an address, ``auto`` or ``local``). Use as a context manager."""
    if ray is not None:
        return RayPool(ray, log_dir=log_dir)
    if devices is None:
        devices = visible_devices()
    return Supervisor(devices=devices, log_dir=log_dir)
