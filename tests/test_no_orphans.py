"""No orphans: every child a command starts ends with it, however it ends (SIGTERM, SIGHUP, SIGKILL).

Each test starts a real parent process (the CLI, or a script driving the supervisor or the compiler
processes), waits until its children are busy (a forward that never returns, a reference that
never returns, a worker in a hung check, an idle compiler), notes every descendant, stops the
parent with the signal, and asserts that nothing it started is left running.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.conftest import ROOT, SGEMM, optional

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads the process tree from /proc")

SIGNALS = [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL]

# the user's code starts a process of its own, says which, then never returns
STARTS_A_SLEEP_AND_HANGS = '''
    import subprocess, pathlib
    sleeper = subprocess.Popen(["sleep", "300"])
    pathlib.Path({pids!r}).write_text(str(sleeper.pid))
    while True:
        pass
'''


def _parents() -> dict[int, int]:
    found = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as stat:
                    found[int(entry)] = int(stat.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    return found


def descendants(pid: int) -> set[int]:
    parents = _parents()
    found, frontier = set(), {pid}
    while frontier:
        frontier = {child for child, parent in parents.items() if parent in frontier} - found
        found |= frontier
    return found


def running(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie waiting to be reaped has ended)."""
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def left_running(pids: set[int], within_s: float = 10.0) -> set[int]:
    deadline = time.monotonic() + within_s
    while (alive := {p for p in pids if running(p)}) and time.monotonic() < deadline:
        time.sleep(0.05)
    return alive


def wait_for(condition, what: str, parent: subprocess.Popen, within_s: float = 120.0):
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        found = condition()
        if found:
            return found
        if parent.poll() is not None:
            out, err = parent.communicate()
            pytest.fail(f"the parent ended (exit {parent.returncode}) before {what}: {err[-2000:]}")
        time.sleep(0.1)
    parent.kill()
    pytest.fail(f"timed out waiting for {what}")


def start(args: list[str], tmp_path: Path, stdin=subprocess.DEVNULL) -> subprocess.Popen:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return subprocess.Popen([sys.executable, *args], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=tmp_path, env=env,
                            preexec_fn=lambda: signal.signal(signal.SIGHUP, signal.SIG_DFL))


def stop_and_check(parent: subprocess.Popen, signum: int, started: set[int]) -> None:
    """Signal the parent; it ends by that signal, and everything it started ends with it."""
    assert started, "the parent had started nothing"
    parent.send_signal(signum)
    try:
        parent.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        parent.kill()
        pytest.fail(f"the parent did not end on {signal.Signals(signum).name}")
    assert parent.returncode == -signum  # ended by the signal, as without cudaopt's handler
    assert not left_running(started), {p: Path(f"/proc/{p}/cmdline").read_bytes() for p in left_running(started, 0)}


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_an_import_whose_forward_never_returns_leaves_nothing_when_stopped(tmp_path, signum):
    optional("torch")
    pids = tmp_path / "sleeper.pid"
    forward = textwrap.indent(textwrap.dedent(STARTS_A_SLEEP_AND_HANGS.format(pids=str(pids))), " " * 8)
    problem = tmp_path / "hang.py"
    problem.write_text("import torch\nimport torch.nn as nn\n\n\nclass Model(nn.Module):\n"
                       f"    def forward(self, x):{forward}\n\n"
                       "def get_inputs():\n    return [torch.randn(16)]\n\n\ndef get_init_inputs():\n    return []\n")
    parent = start(["-m", "cudaopt", "import", "kernelbench", str(problem), "--out", str(tmp_path / "out")], tmp_path)
    sleeper = int(wait_for(lambda: pids.is_file() and pids.read_text(), "the forward ran", parent))
    started = descendants(parent.pid)
    assert sleeper in started and any(b"cudaopt.kernelbench.isolated" in Path(f"/proc/{p}/cmdline").read_bytes()
                                      for p in started if running(p))
    stop_and_check(parent, signum, started)


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_check_with_a_reference_that_never_returns_leaves_nothing_when_stopped(tmp_path, signum):
    folder = tmp_path / "exp"
    shutil.copytree(SGEMM, folder)
    pids = tmp_path / "sleeper.pid"
    body = textwrap.indent(textwrap.dedent(STARTS_A_SLEEP_AND_HANGS.format(pids=str(pids))), "    ")
    (folder / "reference.py").write_text(f"def matmul_f32(a, b, m, n, k):{body}\n")
    config = json.loads((folder / "experiment.json").read_text())
    config.update(reference="reference.py")
    (folder / "experiment.json").write_text(json.dumps(config))
    parent = start(["-m", "cudaopt", "check", "--config", str(folder / "experiment.json")], tmp_path)
    sleeper = int(wait_for(lambda: pids.is_file() and pids.read_text(), "the reference ran", parent))
    started = descendants(parent.pid)
    assert sleeper in started
    stop_and_check(parent, signum, started)


PARENT_OF_WORKERS = '''
import sys, threading, time
from cudaopt.experiment import load_experiment
from cudaopt.pool.supervisor import Supervisor
from cudaopt.wire.protocol import Timeouts
from tests.fakes import FAKE

experiment = load_experiment(__import__("pathlib").Path({config!r}))
hang = experiment.request("// source", entry="hang", timeouts=Timeouts(check_s=3600))
supervisor = Supervisor(devices=[0, 1], command=FAKE)
for worker in supervisor.workers:
    threading.Thread(target=worker.evaluate, args=(hang,), daemon=True).start()  # started off the main thread
time.sleep(3600)
'''


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_gpu_workers_in_a_hung_check_end_with_their_supervisor(tmp_path, signum):
    script = tmp_path / "parent.py"
    script.write_text(PARENT_OF_WORKERS.format(config=str(SGEMM / "experiment.json")))
    parent = start([str(script)], tmp_path)
    workers = wait_for(lambda: len(d := descendants(parent.pid)) == 2 and d, "two workers started", parent)
    time.sleep(1.0)  # in their hung check phase
    stop_and_check(parent, signum, workers)


# about 0.4 s of constant evaluation per line in NVRTC: a compilation of many minutes
SLOW_KERNEL = ('__device__ constexpr long long fib(int n) { return n < 2 ? n : fib(n - 1) + fib(n - 2); }\n'
               'extern "C" __global__ void slow(long long* x) {\n'
               + "".join(f"constexpr long long v{i} = fib(27) + {i}; x[{i}] = v{i};\n" for i in range(3000)) + "}\n")

PARENT_OF_COMPILERS = '''
import sys, tempfile, threading, time
from cudaopt.compilekit.compile_process import CompilerProcess
from cudaopt.wire.protocol import KernelSpec

folder = tempfile.mkdtemp()
compilers = [CompilerProcess(folder)]  # started from the main thread
other = threading.Thread(target=lambda: compilers.append(CompilerProcess(folder)))  # and from another one
other.start()
other.join()
slow = {{"kind": "cubin", "spec": KernelSpec(source=sys.stdin.read(), entry="slow").model_dump(), "arch": "sm_90"}}
for compiler in compilers:  # each busy in a compilation that does not end soon: it reads no more input
    threading.Thread(target=compiler.request, args=(slow, 3600), daemon=True).start()
time.sleep(2.0)
print("ready", flush=True)
time.sleep(3600)
'''


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_compiler_processes_end_with_the_process_they_compile_for(tmp_path, signum):
    script = tmp_path / "parent.py"
    script.write_text(PARENT_OF_COMPILERS.format())
    parent = start([str(script)], tmp_path, stdin=subprocess.PIPE)
    parent.stdin.write(SLOW_KERNEL)
    parent.stdin.close()
    parent.stdin = None  # given whole
    assert parent.stdout.readline().strip() == "ready"
    compilers = descendants(parent.pid)
    assert len(compilers) == 2
    stop_and_check(parent, signum, compilers)
