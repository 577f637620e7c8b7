"""The dispatcher with in-process lanes (retries of a broken transport, errors), and --devices."""

from __future__ import annotations

import pytest

from cudaopt.errors import ExperimentError
from cudaopt.pool.devices import choose, parse_devices, visible_devices
from cudaopt.pool.dispatch import MAX_TRIES, Dispatcher, GpuRef, LaneInterrupted
from cudaopt.wire.results import DeviceInfo, EvalResult


class Lane:
    """Answers every request ok; ``interrupt`` requests break its transport that many times."""

    def __init__(self, index: int, interrupt: int = 0):
        self.index, self.interrupt = index, interrupt
        self.info = DeviceInfo(name="lane GPU", pci_bus_id=f"lane:{index}")
        self.seen: list[str] = []

    @property
    def ref(self) -> GpuRef:
        return GpuRef.of(self.info, self.index)

    def start(self) -> None:
        pass

    def evaluate(self, request, on_event=None) -> EvalResult:
        self.seen.append(request.id)
        if request.kernel.entry == "interrupt" and self.interrupt:
            self.interrupt -= 1
            raise LaneInterrupted(f"lane {self.index} lost its node")
        if request.kernel.entry == "bug":
            raise ZeroDivisionError("a bug")
        return EvalResult(status="ok", request_id=request.id, device=self.info)

    def prefetch(self, kernels) -> None:
        pass

    def stop(self) -> None:
        pass


def requests(sgemm, *entries):
    return [sgemm.request("// k", entry=e, request_id=f"r{i}", defines={"I": i}) for i, e in enumerate(entries)]


def test_a_broken_transport_hands_the_request_back_to_run_again(sgemm):
    lanes = [Lane(0, interrupt=1), Lane(1)]
    with Dispatcher(lanes) as pool:
        results = pool.evaluate_all(requests(sgemm, "interrupt", "ok"), pins=[0, None])
    assert [m.result.status for m in results] == ["ok", "ok"]
    assert lanes[0].seen.count("r0") == 2  # tried again, and ran
    assert pool.notices == []  # the lane itself stays in the pool


def test_a_request_whose_workers_keep_being_lost_is_a_crash_not_a_loop(sgemm):
    lanes = [Lane(0, interrupt=10), Lane(1, interrupt=10)]
    with Dispatcher(lanes) as pool:
        (measured,) = pool.evaluate_all(requests(sgemm, "interrupt"))
    assert measured.result.status == "crashed"
    assert f"{MAX_TRIES} workers were lost while running it" in measured.result.reason
    assert all(c.status == "crashed" for c in measured.result.cases) and measured.result.cases


def test_an_unexpected_error_in_a_lane_is_raised_not_recorded(sgemm):
    with Dispatcher([Lane(0)]) as pool, pytest.raises(ZeroDivisionError):
        pool.evaluate_all(requests(sgemm, "ok", "bug", "ok"))


@pytest.mark.parametrize("text, expected", [("all", None), ("0", [0]), ("1,3", [1, 3]), (" 2 , 0 ", [2, 0])])
def test_devices_are_all_or_ordinals(text, expected):
    assert parse_devices(text) == expected


@pytest.mark.parametrize("text, message", [("0,x", "neither all nor GPU ordinals"), ("", "neither all"),
                                           ("1,1", "GPU 1 named twice: one worker per GPU")])
def test_bad_devices_are_one_line(text, message):
    with pytest.raises(ExperimentError, match=message) as caught:
        parse_devices(text)
    assert str(caught.value).startswith("--devices: ")


def test_device_devices_and_ray_combine_only_sensibly():
    assert choose(None, None, None) == [0] and choose(3, None, None) == [3] and choose(None, "0,1", None) == [0, 1]
    assert choose(None, None, "auto") is None and choose(None, "all", "local") is None
    with pytest.raises(ExperimentError, match="not both"):
        choose(0, "1", None)
    with pytest.raises(ExperimentError, match="the cluster places the workers"):
        choose(None, "0,1", "auto")


def test_all_is_what_this_process_may_use(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")
    assert visible_devices() == [2, 3]
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-8f3c2a")
    with pytest.raises(ExperimentError, match="names GPUs by UUID"):
        visible_devices()


def test_a_ray_address_that_does_not_answer_is_one_line_within_seconds():
    import socket
    import time

    from cudaopt.pool.dispatch import WorkerError
    from cudaopt.pool.ray_cluster import _reachable

    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    start = time.monotonic()
    with pytest.raises(WorkerError, match=f"cannot reach the Ray cluster at ray://127.0.0.1:{port}"):
        _reachable(f"ray://127.0.0.1:{port}")
    assert time.monotonic() - start < 6
    _reachable("auto")  # resolved by Ray itself
