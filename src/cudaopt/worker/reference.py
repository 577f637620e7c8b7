"""Reference outputs from the user's trusted reference: a ``.cu`` kernel or a ``.py`` function.

A ``.py`` reference defines a function (named by the experiment, by default the kernel's
name) that takes every input array and scalar as keyword arguments, by their names in the
kernel signature, and returns the output array (one output) or a dict of name to array.
bfloat16 inputs arrive widened to float32.
"""

from __future__ import annotations

import types
from collections.abc import Callable

import numpy as np

from ..wire.signature import Signature


class ReferenceFailure(RuntimeError):
    """The reference itself failed: not the candidate's fault."""


def load_python(source: str, path: str, function: str) -> Callable:
    module = types.ModuleType("cudaopt_user_reference")
    module.__file__ = path
    try:
        exec(compile(source, path or "<reference>", "exec"), module.__dict__)  # the user's own code
    except Exception as exc:
        raise ReferenceFailure(f"reference {path}: {exc.__class__.__name__}: {exc}") from None
    fn = module.__dict__.get(function)
    if not callable(fn):
        raise ReferenceFailure(f"reference {path}: no function named {function!r}")
    return fn


def call_python(
    fn: Callable,
    signature: Signature,
    inputs: dict[str, np.ndarray],
    scalars: dict,
    output_shapes: dict[str, tuple[int, ...]],
) -> dict[str, np.ndarray]:
    kwargs: dict = {}
    for arg in signature.args:
        if arg.is_input:
            view = inputs[arg.name].copy()
            view.flags.writeable = False
            kwargs[arg.name] = view
        elif not arg.pointer:
            kwargs[arg.name] = scalars[arg.name]
    try:
        result = fn(**kwargs)
    except Exception as exc:
        raise ReferenceFailure(f"reference function raised {exc.__class__.__name__}: {exc}") from None
    names = [a.name for a in signature.outputs]
    outputs = reference_outputs(result, names, sequences=False)
    checked = {}
    for name in names:
        try:
            array = np.asarray(outputs[name])
        except (TypeError, ValueError) as exc:  # ragged lists and the like
            raise ReferenceFailure(f"reference output {name!r} is no array: {exc}") from None
        if array.dtype.kind not in "biuf":
            raise ReferenceFailure(f"reference output {name!r} is {type(outputs[name]).__name__} "
                                   f"({array.dtype}), not an array of numbers")
        if tuple(array.shape) != output_shapes[name]:
            array = array.reshape(-1) if array.size == int(np.prod(output_shapes[name])) else array
            if array.size != int(np.prod(output_shapes[name])):
                raise ReferenceFailure(
                    f"reference output {name!r} has shape {np.shape(outputs[name])}, "
                    f"the case says {output_shapes[name]}"
                )
            array = array.reshape(output_shapes[name])
        checked[name] = array
    return checked


def named_outputs(result, names: list[str], sequences: bool = True) -> dict:
    """A function's result as output name -> value: a dict by name, a sequence in signature order,
    or the one output's value (``sequences`` False: a sequence is one value when there is one
    output, as an array-like list is). ValueError says what does not fit."""
    if isinstance(result, dict):
        missing = [n for n in names if n not in result]
        if missing:
            raise ValueError(f"returned no output {missing[0]!r}")
        return {n: result[n] for n in names}
    if isinstance(result, (tuple, list)) and (sequences or len(names) > 1):
        if len(result) != len(names):
            raise ValueError(f"returned {len(result)} values for the outputs {names}")
        return dict(zip(names, result, strict=True))
    if len(names) != 1:
        raise ValueError(f"returned one value for the outputs {names}: return a dict, or one value per output")
    return {names[0]: result}


def reference_outputs(result, names: list[str], sequences: bool = True) -> dict:
    """:func:`named_outputs` for the reference, whose misfits are reference failures."""
    try:
        return named_outputs(result, names, sequences)
    except ValueError as exc:
        raise ReferenceFailure(f"reference {exc}") from None


class CudaReference:
    """A ``.cu`` reference run over a case's working buffers: compiled once, launched like a candidate."""

    def __init__(self, launcher):
        self.launcher = launcher
        self._kernels: dict[tuple, object] = {}

    def kernel(self, ref):
        from ..wire.launch import device_defines
        from ..wire.protocol import KernelSpec
        from ..compilekit.compiler import CompileError, compile_kernel

        key = (ref.source, ref.entry, self.launcher.gpu.arch)
        if key not in self._kernels:
            try:
                spec = device_defines(KernelSpec(source=ref.source, entry=ref.entry), self.launcher.gpu.facts())
                compiled = compile_kernel(spec, self.launcher.gpu.arch, math=False)  # trusted: not held to a policy
                self._kernels[key] = self.launcher.gpu.load_module(compiled.cubin).get_kernel(ref.entry)
            except CompileError as exc:
                raise ReferenceFailure(f"the reference kernel does not compile:\n{exc.log}") from None
            except Exception as exc:
                raise ReferenceFailure(f"the reference has no kernel {ref.entry!r}: {exc}") from None
        return self._kernels[key]

    def run(self, ref, signature: Signature, case, buffers) -> dict:
        """Launch the reference on the staged inputs; its outputs widened to float64 on the device
        (:class:`answers.DeviceAnswer`, the caller scrubs them)."""
        from ..wire.launch import LaunchError, resolve_launch
        from .answers import DeviceAnswer
        from .launcher import CaseFailure

        spec = ref.launch or case.launch
        if spec is None:
            raise ReferenceFailure(f"case {case.name!r}: no launch configuration for the reference kernel")
        try:
            launch = resolve_launch(spec, {**self.launcher.gpu.facts(), **case.scalars})
        except LaunchError as exc:
            raise ReferenceFailure(f"case {case.name!r}: reference launch {exc.field}: {exc}") from None
        gpu = self.launcher.gpu
        try:
            self.launcher.launch(self.kernel(ref), launch, buffers.kernel_args(case.scalars))
            self.launcher.sync()
        except CaseFailure as failure:
            if self.launcher.dead:
                raise
            raise ReferenceFailure(f"reference kernel failed: {failure.reason}") from None
        if buffers.guard_violations():
            raise ReferenceFailure("the reference kernel wrote outside its outputs")
        produced = {}
        try:
            for arg in signature.outputs:
                n = buffers.elements(arg.name)
                answer = DeviceAnswer(gpu, gpu.alloc(8 * n), buffers.output_shapes[arg.name])
                produced[arg.name] = answer
                gpu.widen(buffers.output_ptr(arg.name), answer.ptr, n, arg.dtype)
                stats = gpu.compare(buffers.output_ptr(arg.name), answer.ptr, n, arg.dtype, np.inf, np.inf)
                if stats["unwritten"]:
                    raise ReferenceFailure(f"the reference kernel left {stats['unwritten']} elements of "
                                           f"{arg.name!r} unwritten")
        except BaseException:
            for answer in produced.values():
                answer.scrub()
            raise
        return produced
