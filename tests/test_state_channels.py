"""Nothing a launch leaves behind reaches the next, and nothing after a launch tells whether it is
checked: the runner's side of those rules on the CPU, through the fake device. (The GPU tests in
tests/gpu/test_state_channels_gpu.py run kernels that use each channel on a real GPU.)"""

from __future__ import annotations

import numpy as np
import pytest

from cudaopt.worker import entries as entries_module
from cudaopt.compilekit.compiler import compile_kernel
from cudaopt.compilekit.cubin import inspect_cubin, module_sections
from cudaopt.worker.runner import Runner
from cudaopt.wire.protocol import KernelSpec, Limits
from tests.fake_device import FakeDevice
from tests.test_runner_fake_device import SIGNATURE, SIZES, relu, request

COUNTER_SOURCE = ("__device__ unsigned launches;\n__constant__ float scale[4] = {1, 1, 1, 1};\n" + SIGNATURE +
                  " {\n    int i = blockIdx.x * blockDim.x + threadIdx.x;\n"
                  "    if (i == 0) ++launches;\n    if (i < n) y[i] = fmaxf(x[i], 0.0f) * scale[i & 3];\n}\n")


def cubin_of(source: str) -> bytes:
    return bytes(compile_kernel(KernelSpec(source=source, entry="relu"), "sm_90").cubin.code)


def test_every_variable_section_is_found_with_its_load_image():
    """__device__ memory is zeroed at load (no image), __constant__ data has one: both restorable."""
    sections, lost = module_sections(cubin_of(COUNTER_SOURCE))
    assert not lost
    by_name = {s.name: s for s in sections}
    assert by_name[".nv.global"].image is None and by_name[".nv.global"].variables == (("launches", 0, 4),)
    constant = by_name[".nv.constant3"]
    assert constant.variables == (("scale", 0, 16),)
    assert np.frombuffer(constant.image, np.float32).tolist() == [1, 1, 1, 1]
    assert inspect_cubin(cubin_of(COUNTER_SOURCE)).global_bytes == 4 + 16  # __constant__ counts too


def test_headers_globals_are_restored_not_refused():
    """<cooperative_groups.h> and <cuda/pipeline> define globals of their own: an honest kernel that
    includes them stays under the default limit, and every one of them is restored."""
    source = "#include <cooperative_groups.h>\n#include <cuda/pipeline>\n" + COUNTER_SOURCE
    state = inspect_cubin(cubin_of(source))
    assert 1024 < state.global_bytes <= Limits().global_bytes
    sections, lost = module_sections(cubin_of(source))
    assert not lost and sum(s.size for s in sections) == state.global_bytes


def counting(seen: list):
    """A kernel that reads its launch counter and its __constant__ scale, then bumps the counter
    and writes the scale through a pointer (as a kernel can through a generic address)."""

    def body(dev, launch, x, y, n):
        counter = dev.view(dev.global_range(None, "launches")[0], np.uint32, 1)
        scale = dev.view(dev.global_range(None, "scale")[0], np.float32, 4)
        seen.append((int(counter[0]), float(scale[0])))
        counter[0] += 1
        scale[:] = 7.0
        relu(dev, launch, x, y, n)

    return body


def evaluate(body, source=COUNTER_SOURCE):
    device = FakeDevice()
    device.kernel("relu", body, SIZES, 0.02)
    return Runner(device).evaluate(request(source=source))


def test_module_variables_are_back_at_their_load_image_before_every_launch():
    seen: list = []
    result = evaluate(counting(seen))
    assert result.status == "ok", result.reason
    assert len(seen) == 3 + 12 and set(seen) == {(0, 1.0)}  # checks, warm-ups, timed: each finds the image


def test_without_the_restore_a_launch_sees_what_the_last_one_left(monkeypatch):
    """The hole the restore closes: the counter counts and the scale keeps what was written."""
    monkeypatch.setattr(entries_module.ModuleState, "restore", lambda self: None)
    seen: list = []
    evaluate(counting(seen))
    assert seen[0] == (0, 1.0) and seen[-1] == (len(seen) - 1, 7.0)


def test_a_kernel_that_writes_the_image_the_restore_copies_from_is_refused():
    """Changing the device copy of the load image (so that the restore would carry state into the
    next launch) is found after the launches."""

    def body(dev, launch, x, y, n):
        relu(dev, launch, x, y, n)
        scale = dev.global_range(None, "scale")[0]
        for base, data in dev.memory.items():  # every allocation holding the image of the constants
            if base != scale and data.size == 16 and np.array_equal(data.view(np.float32), np.ones(4, np.float32)):
                data.view(np.float32)[:] = 2.0

    result = evaluate(body)
    assert result.status == "global_state" and "copy of .nv.constant3" in result.reason


def test_every_launch_is_followed_by_the_same_work():
    """Inputs re-checked, outputs copied aside and digested after every launch of the candidate,
    checked or not: the gap after a launch says nothing about whether it is checked."""
    device = FakeDevice()
    device.kernel("relu", relu, SIZES, 0.02)
    calls: list[list[str]] = []
    for name in ("scan_launch", "copy_async", "digest"):
        original = getattr(device, name)

        def traced(*args, _name=name, _original=original, **kwargs):
            if calls:
                calls[-1].append(_name + (f":{args[5]}" if _name == "scan_launch" else ""))
            return _original(*args, **kwargs)

        setattr(device, name, traced)
    original_launch = device.launch

    def launch(kernel, *args):
        if kernel.name == "relu":
            calls.append([])
        return original_launch(kernel, *args)

    device.launch = launch
    result = Runner(device).evaluate(request())
    assert result.status == "ok", result.reason
    between = calls[3:-1]  # from each warm-up or timed launch to the next (the last is followed by the judging)
    assert len(between) == 11 and all(c == between[0] for c in between), between
    assert between[0][:3] == ["scan_launch:True", "copy_async", "digest"]


def test_outputs_set_aside_and_changed_before_they_are_judged_are_caught():
    """A kernel that overwrites the copies of earlier launches' outputs (to mend a launch it cheated
    on) changes their digest, whose key it cannot know."""

    def body(dev, launch, x, y, n):
        relu(dev, launch, x, y, n)
        for data in dev.memory.values():  # buffers of the output's size that hold a ReLU's output
            if data.size == int(n) * 4 and (data.view(np.float32) >= 0).all():
                data.view(np.float32)[0] += 1.0

    result = evaluate(body, source=COUNTER_SOURCE.replace("if (i == 0) ++launches;", ""))
    assert result.status == "guard_violation" and "set aside from timed launch" in result.reason


@pytest.mark.parametrize("frame", [0, 4096, 100_000])
def test_the_local_memory_wipe_covers_the_frame_of_every_kernel_launched(frame):
    """Before the first launch of a case's kernel, the wipe is told its frame: every thread's local
    memory is then poisoned that deep (and the stack limit's depth) before each launch."""
    device = FakeDevice()
    device.kernel("relu", relu, SIZES, 0.02).local_bytes = frame
    result = Runner(device).evaluate(request())
    assert result.status == "ok", result.reason
    assert device.wipes.local_bytes == frame and device.wipes.poisons >= 3 + 12


def test_stack_frames_that_the_driver_does_not_report_are_wiped_too():
    """A kernel's arrays in local memory show in ptxas's stack frame, not always in the driver's
    local_size_bytes: the wipe covers the larger."""
    from tests.conftest import kernel_source

    device = FakeDevice()
    device.kernel("relu", relu, SIZES, 0.02)
    result = Runner(device).evaluate(request(source=kernel_source("local_memo.cu")))
    assert result.status == "ok", result.reason
    assert result.compile.stack_bytes >= 4096 and device.wipes.local_bytes >= result.compile.stack_bytes
