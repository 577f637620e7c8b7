"""Shared fixtures. Tests marked ``gpu`` skip themselves when no CUDA device is present."""

from __future__ import annotations

import functools
import json
import shutil
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SGEMM = ROOT / "examples" / "sgemm"
KERNELS = Path(__file__).resolve().parent / "kernels"


# what the README's test command does not install, and how to add it (.ci/run runs those tests too)
OPTIONAL = {"torch": "PyTorch: pip install -e '.[torch]'", "ray": "Ray: pip install -e '.[ray]'",
            "cupy": "cupy: pip install cupy-cuda13x"}


def optional(name: str):
    """The optional package ``name``, imported; without it the calling test (or module) skips,
    saying what to install: the one way a test needs torch, Ray or cupy."""
    return pytest.importorskip(name, reason=f"needs {OPTIONAL[name]}")


@functools.lru_cache(maxsize=1)
def gpu_present() -> bool:
    """Whether a CUDA device is there, asked without creating a context in the test process."""
    try:
        from cuda.bindings import driver

        (err,) = driver.cuInit(0)
        err2, count = driver.cuDeviceGetCount()
        return err == driver.CUresult.CUDA_SUCCESS and err2 == driver.CUresult.CUDA_SUCCESS and count > 0
    except Exception:
        return False


def pytest_collection_modifyitems(config, items):
    if gpu_present():
        return
    skip = pytest.mark.skip(reason="no CUDA device present")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def no_real_nvidia_docs(tmp_path_factory, monkeypatch):
    """No test reaches docs.nvidia.com or the user's cache: an empty cache, pages from a closed loopback port."""
    import socket

    from cudaopt.agent.research import default_library

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    monkeypatch.setenv("CUDAOPT_CACHE_DIR", str(tmp_path_factory.mktemp("cache")))
    monkeypatch.setenv("CUDAOPT_DOCS_MIRROR", f"http://127.0.0.1:{port}")
    default_library.cache_clear()
    yield
    default_library.cache_clear()


@pytest.fixture
def sgemm():
    from cudaopt.experiment import load_experiment

    return load_experiment(SGEMM / "experiment.json")


def kernel_source(name: str) -> str:
    return (KERNELS / name).read_text()


@pytest.fixture
def example(tmp_path):
    """A writable copy of the sgemm example; returns (dir, edit) where edit(file, fn) rewrites JSON."""
    for name in ("experiment.json", "input_cases.json", "reference.cu", "initial.cu", "tunable.cu", "vendor.py"):
        shutil.copy(SGEMM / name, tmp_path / name)

    def edit(name, change):
        path = tmp_path / name
        data = json.loads(path.read_text())
        change(data)
        path.write_text(json.dumps(data))

    return tmp_path, edit
