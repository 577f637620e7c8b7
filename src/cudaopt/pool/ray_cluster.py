"""The Ray backend: one worker actor per free GPU of a Ray cluster, the same worker inside.

Each actor reserves one GPU (``num_gpus=1``) and a CPU for compiling (``num_cpus``), and owns
a :class:`~.supervisor.Worker` on the GPU Ray gave it: the same worker process, request and
result types, phase timeouts, crash retirement and respawn as on one machine, and the same
allow-listed environment. Only the transport differs: a request goes to the actor as its JSON
and the worker's messages stream back as they come (a Ray generator); the run directory, the
cache and every decision stay on the driver. An actor lost with its node hands its request back
to run on another GPU (dispatch.py); a worker that cannot start takes its GPU out of the pool.

``address``: a cluster's address, ``auto`` (the cluster this machine belongs to) or ``local``
(a cluster started here for this process, stopped with it; secrets are kept out of its
environment). Every node needs this version of cudaopt installed. Ray is imported here only,
when a pool is opened (``pip install -e '.[ray]'`` in cudaopt's checkout).
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import queue
import socket
import tempfile
import threading
import time
from pathlib import Path

from ..errors import ExperimentError
from ..compilekit.sandbox import looks_secret
from ..wire.messages import Done, Fatal, Prefetch, read_message
from ..wire.protocol import EvalRequest, KernelSpec
from ..wire.results import DeviceInfo, EvalResult
from .dispatch import Dispatcher, GpuRef, LaneInterrupted, OnEvent, WorkerError
from .supervisor import STARTUP_TIMEOUT_S, Worker

PLACEMENT_S = 60.0  # beyond the worker's own start: for Ray to place the actor and start its process
MARGIN_S = 30.0
CONNECT_S = 5.0  # how long an address may take to accept a connection
RELEASE_S = 10.0  # how long closing a pool waits for Ray to count its GPUs free again


def _ray():
    try:
        import ray
    except ImportError:
        raise ExperimentError("--ray", "", "Ray is not installed: pip install -e '.[ray]' in cudaopt's checkout") from None
    return ray


@contextlib.contextmanager
def _without_secrets():
    """os.environ without secret-looking names while a local cluster starts: its processes inherit it."""
    hidden = {name: os.environ.pop(name) for name in list(os.environ) if looks_secret(name)}
    try:
        yield
    finally:
        os.environ.update(hidden)


def connect(address: str, *, gpus: int | None = None, cpus: int | None = None) -> bool:
    """Join the cluster at ``address`` (or start one for ``local``); True when this call started it.
    An existing connection of this process is used as it is."""
    ray = _ray()
    if ray.is_initialized():
        return False
    quiet = {"include_dashboard": False, "log_to_driver": False, "logging_level": logging.ERROR}
    if address == "local":
        with _without_secrets():
            ray.init(num_gpus=gpus, num_cpus=cpus, **quiet)
        return True
    _reachable(address)
    try:
        ray.init(address=address, **{k: v for k, v in quiet.items() if k != "include_dashboard"})
    except (ConnectionError, RuntimeError, ValueError) as exc:
        raise WorkerError(f"cannot join the Ray cluster at {address}: {' '.join(str(exc).split())[:300]}") from None
    return False


def _reachable(address: str) -> None:
    """An address with a port answers within seconds (Ray itself would retry for minutes)."""
    host, _, port = address.removeprefix("ray://").rpartition(":")
    if not host or not port.isdigit():
        return  # "auto", or a form Ray resolves itself
    try:
        socket.create_connection((host, int(port)), timeout=CONNECT_S).close()
    except OSError as exc:
        raise WorkerError(f"cannot reach the Ray cluster at {address}: {exc.strerror or exc}") from None


class WorkerActor:
    """Lives on a Ray node and owns the worker process of the GPU Ray gave it."""

    def __init__(self, command: list[str] | None, env: dict[str, str] | None):
        import ray

        self.device = int(ray.get_gpu_ids()[0])
        self.host = ray.util.get_node_ip_address()
        self._logs = tempfile.TemporaryDirectory(prefix="cudaopt-ray-worker-")
        self.worker = Worker(self.device, Path(self._logs.name) / "worker.log", command, env)

    def start(self) -> dict:
        try:
            self.worker.start()
        except WorkerError as exc:
            return {"error": f"{exc} (Ray node {self.host})"}
        return {"device": self.worker.info.to_json(), "gpu": self.device, "host": self.host}

    def evaluate(self, line: str):
        """The worker's messages for one request, as JSON lines, ending with its result (or a fatal one)."""
        request = EvalRequest.model_validate_json(line)
        messages: queue.Queue = queue.Queue()

        def run() -> None:
            try:
                result = self.worker.evaluate(request, on_event=lambda m: None if isinstance(m, Done) else messages.put(m))
                messages.put(Done(result=result))
            except WorkerError as exc:
                messages.put(Fatal(message=f"{exc} (Ray node {self.host})"))

        threading.Thread(target=run, daemon=True).start()
        while True:
            message = messages.get()
            yield message.to_json()
            if isinstance(message, Done | Fatal):
                return

    def prefetch(self, line: str) -> None:
        try:
            self.worker.prefetch(Prefetch.model_validate_json(line).prefetch)
        except WorkerError:
            pass  # the next request starts the worker again and says why it cannot

    def stop(self) -> str:
        """Stop the worker; its log, for the driver to keep."""
        self.worker.stop()
        log = self.worker.log_path.read_text(errors="replace") if self.worker.log_path.is_file() else ""
        self._logs.cleanup()
        return log


@functools.cache
def _actor_class():
    return _ray().remote(WorkerActor)


def _first_line(exc: BaseException) -> str:
    return next((line.strip() for line in str(exc).splitlines() if line.strip()), exc.__class__.__name__)


class ActorLane:
    """The dispatcher's lane for one actor: starts it, streams its requests, replaces it when lost."""

    def __init__(self, position: int, command: list[str] | None, env: dict[str, str] | None,
                 log_dir: Path | None, cpus: float):
        self.position = position
        self.command, self.env, self.log_dir = command, env, log_dir
        self.options = {"num_gpus": 1, "num_cpus": cpus, "max_restarts": 0}
        self.actor = None
        self.info = DeviceInfo()
        self._ref = GpuRef(name="", index=None, host="ray")

    @property
    def ref(self) -> GpuRef:
        return self._ref

    def start(self) -> None:
        ray = _ray()
        self.actor = _actor_class().options(**self.options).remote(self.command, self.env)
        wait = STARTUP_TIMEOUT_S + PLACEMENT_S
        try:
            answer = ray.get(self.actor.start.remote(), timeout=wait)
        except ray.exceptions.GetTimeoutError:
            self._drop()
            raise WorkerError(f"no worker of the Ray cluster answered within {wait:g} s (GPU {self.position}: "
                              "its GPUs are busy, or a node lacks cudaopt)") from None
        except ray.exceptions.RayError as exc:
            self._drop()
            raise WorkerError(f"the Ray worker actor did not start: {_first_line(exc)}") from None
        if "error" in answer:
            self._drop()
            raise WorkerError(answer["error"])
        self.info = DeviceInfo.model_validate_json(answer["device"])
        self._ref = GpuRef.of(self.info, answer["gpu"], answer["host"])

    def evaluate(self, request: EvalRequest, on_event: OnEvent | None = None) -> EvalResult:
        ray = _ray()
        if self.actor is None:
            self.start()
        timeouts = request.timeouts
        longest = max([timeouts.compile_s, timeouts.check_s, timeouts.timing_s]
                      + [max(c.check_s, c.timing_s) for c in timeouts.cases.values()])
        wait = longest + STARTUP_TIMEOUT_S + MARGIN_S  # the worker sends a message at least once a phase
        stream = self.actor.evaluate.remote(request.to_json())
        try:
            while True:
                ready, _ = ray.wait([stream], timeout=wait)
                if not ready:
                    self._drop()
                    raise LaneInterrupted(f"the Ray worker on {self.ref.label} sent nothing for {wait:g} s")
                message = read_message(ray.get(next(stream)))
                if isinstance(message, Done):
                    return message.result
                if isinstance(message, Fatal):
                    raise WorkerError(message.message)
                if on_event is not None:
                    on_event(message)
        except StopIteration:
            self._drop()
            raise LaneInterrupted(f"the Ray worker on {self.ref.label} ended its answer early") from None
        except ray.exceptions.RayActorError as exc:
            self._drop()
            raise LaneInterrupted(f"the Ray worker on {self.ref.label} was lost: {_first_line(exc)}") from None

    def prefetch(self, kernels: list[KernelSpec]) -> None:
        if self.actor is None:
            self.start()
        self.actor.prefetch.remote(Prefetch(prefetch=kernels).to_json())

    def stop(self) -> None:
        if self.actor is None:
            return
        ray = _ray()
        try:
            log = ray.get(self.actor.stop.remote(), timeout=30)
            if self.log_dir is not None and log:
                host = (self.ref.host or "ray").replace(":", "_")
                (self.log_dir / f"worker-{host}-gpu{self.ref.index}.log").write_text(log)
        except ray.exceptions.RayError:
            pass  # the actor is gone already; so is its log
        self._drop()

    def _drop(self) -> None:
        if self.actor is not None:
            with contextlib.suppress(Exception):
                _ray().kill(self.actor)
        self.actor = None


class RayPool(Dispatcher):
    """Evaluates requests on a Ray cluster's GPUs, one worker actor each; use as a context manager.

    ``gpus``/``cpus``: the resources of a ``local`` cluster (default: what Ray detects);
    ``cpus_per_gpu``: the CPUs each actor reserves for its worker's compilations.
    """

    def __init__(self, address: str = "auto", *, log_dir: Path | None = None, command: list[str] | None = None,
                 env: dict[str, str] | None = None, gpus: int | None = None, cpus: int | None = None,
                 cpus_per_gpu: float = 1.0):
        ray = _ray()
        self.address = address
        self.backend = f"ray {address}"
        self._owns = connect(address, gpus=gpus, cpus=cpus)
        free = int(ray.available_resources().get("GPU", 0))
        if free == 0:
            self._shutdown()
            raise WorkerError(f"the Ray cluster ({address}) has no free GPU")
        if log_dir is not None:
            log_dir.mkdir(parents=True, exist_ok=True)
        super().__init__([ActorLane(k, command, env, log_dir, cpus_per_gpu) for k in range(free)])

    def close(self) -> None:
        """Stop every actor and wait (briefly) until Ray has their GPUs back, for whoever opens the next pool."""
        ray = _ray()
        held = sum(1 for lane in self.lanes if lane.actor is not None)
        expected = ray.available_resources().get("GPU", 0) + held
        try:
            super().close()
            deadline = time.monotonic() + RELEASE_S
            while ray.available_resources().get("GPU", 0) < expected and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            self._shutdown()

    def _shutdown(self) -> None:
        if self._owns:
            _ray().shutdown()
            self._owns = False
