from __future__ import annotations

import pytest

from cudaopt.wire.protocol import Timeouts, TimingProtocol


@pytest.fixture(scope="session")
def supervisor(tmp_path_factory):
    from cudaopt.pool.supervisor import Supervisor

    with Supervisor(devices=[0], log_dir=tmp_path_factory.mktemp("workers")) as sup:
        yield sup


@pytest.fixture
def gpu_to_itself(supervisor):
    """The session's worker stopped (the next request starts it again): a test whose command starts
    workers of its own gets the GPU's memory, not what the session's worker keeps of earlier cases."""
    for worker in supervisor.workers:
        worker.stop()


FAST = TimingProtocol(warmup=2, iterations=10)


def needs_memory(need: int) -> pytest.MarkDecorator:
    """Skip where this GPU holds less than ``need`` bytes (a case of KernelBench's largest size needs
    an H200): the product refuses such a case before any launch, which the CPU tests cover."""
    from cudaopt.preflight import gpu_memory
    from cudaopt.worker.case_data import memory_text

    total, origin = gpu_memory()
    return pytest.mark.skipif(total < need, reason=f"needs about {memory_text(need)} of GPU memory, more than "
                                                   f"the {memory_text(total)} {origin}")


@pytest.fixture
def small_request(sgemm):
    """Build a request for a kernel on the example's cases, without the 4096 cube."""

    def build(source, *, launch=None, entry=None, timeouts=None, protocol=None, cases=None):
        request = sgemm.request(source, entry=entry, launch=launch, protocol=protocol or FAST,
                                timeouts=timeouts or Timeouts())
        wanted = cases or {"odd-31x37x29", "square-256", "rect-384x256x320"}
        request.cases = [c for c in request.cases if c.name in wanted]
        return request

    return build


@pytest.fixture(scope="session")
def gpu():
    """The GPU in this process (beside the supervisor's worker), for runners built by a test."""
    from cudaopt.worker.gpu import Gpu

    return Gpu(0)


def runner_without(gpu, monkeypatch, *, restore: bool = True, local: bool = True, shared: bool = True):
    """A runner in this process with the named state rules switched off, so a test can show that
    one rule alone stops a kernel which the others would stop too: ``restore``, the module's
    variables set back before each launch; ``local``, the local-memory wipe; ``shared``, the
    shared-memory, register and local-memory poison."""
    from cudaopt.worker.entries import ModuleState
    from cudaopt.worker.leftovers import Leftovers
    from cudaopt.worker.runner import Runner

    if not restore:
        monkeypatch.setattr(ModuleState, "restore", lambda self: None)
    if not local:
        monkeypatch.setattr(Leftovers, "poison_local", lambda self: None)
    if not shared:
        monkeypatch.setattr(Leftovers, "poison", lambda self, seen=0: None)
    return Runner(gpu)
