"""Shared fixtures. Tests marked ``gpu`` skip themselves when no CUDA device is present."""

from __future__ import annotations

import functools
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SGEMM = ROOT / "examples" / "sgemm"
KERNELS = Path(__file__).resolve().parent / "kernels"


@functools.lru_cache(maxsize=1)
def gpu_present() -> bool:
    try:
        from cuda.core import Device

        Device(0).set_current()
        return True
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="no CUDA device present")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture
def sgemm():
    from cudaopt.experiment import load_experiment

    return load_experiment(SGEMM / "experiment.json")


def kernel_source(name: str) -> str:
    return (KERNELS / name).read_text()
