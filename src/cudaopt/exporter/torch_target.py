"""``--to torch``: one self-contained Python module that makes the kernel a PyTorch operator.

The module needs torch and cuda-core/cuda-bindings, never cudaopt nor nvcc. On the first call on a
device it compiles the kernel with NVRTC for that device (as the harness compiled it: C++17, the
GPU's SM count as ``CUDAOPT_NUM_SMS``), loads it into PyTorch's context and keeps it. It
registers ``cudaopt::NAME`` (outputs allocated) and ``cudaopt::NAME_out`` (outputs passed in and
written) with fake implementations, so the op traces under ``torch.compile(fullgraph=True)``;
launches go through ``cuLaunchKernel`` on PyTorch's current stream, so they can be captured in a
CUDA graph. Grid, block, shared bytes and the kernel are plain Python generated from the launch
expressions (lower.py); inputs are checked for device, dtype, shape and contiguity.
"""

from __future__ import annotations

from ..crosschecks import SCALAR_RANGES
from ..errors import ExperimentError
from ..harness.host_headers import HEADERS, PRELUDE_NAME
from ..harness.nvrtc_build import HEADER_LIBS
from ..wire.launch import DEVICE_NAMES
from ..wire.protocol import Expr
from .launch_code import python_launch_config
from .lower import PY_HELPERS, py_name, to_python
from .source import ExportSource

TORCH_DTYPES = {"float32": "float32", "float64": "float64", "float16": "float16", "bfloat16": "bfloat16",
                "int8": "int8", "uint8": "uint8", "int16": "int16", "uint16": "uint16", "int32": "int32",
                "uint32": "uint32", "int64": "int64", "uint64": "uint64"}
C_SCALARS = {"float32": "c_float", "float64": "c_double", "int8": "c_int8", "uint8": "c_uint8", "int16": "c_int16",
             "uint16": "c_uint16", "int32": "c_int32", "uint32": "c_uint32", "int64": "c_int64", "uint64": "c_uint64"}

_RUNTIME = '''
_STATE = {}
_DEVICE_TYPE = "cuda"  # where the kernel runs (tests of the checks alone set "cpu")
_GUARD = _threading.Lock()
DEFAULT_SHARED_LIMIT = 48 * 1024


def _check(result, what):
    err = result[0] if isinstance(result, tuple) else result
    if int(err) != 0:
        from cuda.bindings import driver
        _, name = driver.cuGetErrorName(err)
        raise RuntimeError(f"{ENTRY}: {what} failed: {name.decode() if name else err}")
    return result[1] if isinstance(result, tuple) and len(result) == 2 else result


def _include_dirs():
    """The CUDA header roots cuda.pathfinder finds, in the order the harness searched them."""
    found = []
    try:
        from cuda.pathfinder import find_nvidia_header_directory
    except ImportError:
        return found
    for lib in HEADER_LIBS:
        try:
            directory = find_nvidia_header_directory(lib)
        except Exception:  # pathfinder could not search for this library: NVRTC says what is missing
            directory = None
        if directory and directory not in found:
            found.append(directory)
    return found


def compile_cubin(arch, num_sms):
    """The kernel compiled by NVRTC for ``arch`` (e.g. "sm_90"), as the harness compiled it: C++17, the
    same host-macro prelude and C headers (written to a temporary folder), the same header roots."""
    import os
    import tempfile

    from cuda.core import Program, ProgramOptions

    with tempfile.TemporaryDirectory(prefix="cudaopt-export-") as folder:
        for header, text in HOST_HEADERS.items():
            with open(os.path.join(folder, header), "w") as f:
                f.write(text)
        options = ProgramOptions(name="kernel.cu", arch=arch, std="c++17",
                                 define_macro=[("CUDAOPT_NUM_SMS", str(num_sms))],
                                 include_path=[folder, *_include_dirs()], pre_include=PRELUDE_NAME)
        return bytes(Program(KERNEL_SOURCE, "c++", options).compile("cubin").code)


class _Loaded:
    """The kernel on one device: its module in PyTorch's (primary) context and its functions."""

    def __init__(self, index):
        from cuda.bindings import driver

        _torch.cuda.init()
        props = _torch.cuda.get_device_properties(index)
        self.num_sms = int(props.multi_processor_count)
        _check(driver.cuInit(0), "cuInit")
        device = _check(driver.cuDeviceGet(index), "cuDeviceGet")
        self.context = _check(driver.cuDevicePrimaryCtxRetain(device), "cuDevicePrimaryCtxRetain")
        self.context_id = int(self.context)
        _check(driver.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")
        self.cubin = compile_cubin(f"sm_{props.major}{props.minor}", self.num_sms)
        self.module = _check(driver.cuModuleLoadData(self.cubin), "cuModuleLoadData")
        self.functions = {}
        self.shared = {}
        for name in KERNELS:
            self.functions[name] = _check(driver.cuModuleGetFunction(self.module, name.encode()),
                                          f"cuModuleGetFunction({name})")
            self.shared[name] = DEFAULT_SHARED_LIMIT

    def function(self, name, shared_bytes):
        func = self.functions[name]
        if shared_bytes > self.shared[name]:  # more than 48 KB of dynamic shared memory is opt-in
            from cuda.bindings import driver

            attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            _check(driver.cuFuncSetAttribute(func, attr, shared_bytes),
                   f"allowing {shared_bytes} bytes of dynamic shared memory")
            self.shared[name] = shared_bytes
        return func


def loaded(index):
    """The kernel loaded on CUDA device ``index`` (compiled on the first call, then kept)."""
    state = _STATE.get(index)
    if state is None:
        with _GUARD:
            state = _STATE.get(index)
            if state is None:
                state = _STATE[index] = _Loaded(index)
    return state


_PLANS = {}  # (device, *scalars) -> _Plan: a call like an earlier one skips every check but the tensors'
_MAX_PLANS = 1024
_THREAD = _threading.local()  # the context this thread last made current for the kernel
_PLAIN = (_torch.Tensor, _torch.nn.Parameter)  # what the eager call launches directly
_RAW_STREAM = getattr(_torch._C, "_cuda_getCurrentRawStream", None)  # the current stream's handle, cheaply
_BUMP = getattr(_torch._C, "_increment_version", None) or _torch.autograd.graph.increment_version  # takes a tuple


def _current_stream(index):
    """PyTorch's current stream on ``index`` as a raw handle (the call torch's own generated code makes)."""
    if _RAW_STREAM is not None:
        return _RAW_STREAM(index)
    return _torch.cuda.current_stream(index).cuda_stream


class _Plan:
    """One launch checked for one device and one set of scalars: the function, the dimensions, the
    expected tensors and a parameter array whose pointer slots each call fills (under ``lock``, as
    cuLaunchKernel copies the parameters before it returns)."""

    def __init__(self, device, dtypes, shapes, config, values):
        from cuda.bindings import driver

        entry, grid, block, shared = config
        self.device, self.dtypes, self.shapes = device, dtypes, tuple(_torch.Size(s) for s in shapes)
        self.index, self.entry = device.index, entry
        self.state = loaded(device.index)
        self.values = values  # ctypes objects in the signature's order; pointers are c_void_p
        self.slots = [v for v in values if isinstance(v, _ctypes.c_void_p)]
        self.array = (_ctypes.c_void_p * len(values))(*[_ctypes.addressof(v) for v in values])
        self.address = _ctypes.addressof(self.array)
        self.lock = _threading.Lock()
        self.start = _functools.partial(driver.cuLaunchKernel, self.state.function(entry, shared), *grid, *block,
                                       shared)
        self.set_context = _functools.partial(driver.cuCtxSetCurrent, self.state.context)
        self.success = driver.CUresult.CUDA_SUCCESS

    def launch(self):
        """cuLaunchKernel on the current stream with the slots as filled (the caller holds ``lock``)."""
        if getattr(_THREAD, "context", None) != self.state.context_id:
            _check(self.set_context(), "cuCtxSetCurrent")
            _THREAD.context = self.state.context_id
        result = self.start(_current_stream(self.index), self.address, 0)
        if result[0] != self.success:
            _check(result, f"launching {self.entry}")


def _remember(key, plan):
    if len(_PLANS) >= _MAX_PLANS:
        _PLANS.clear()
    _PLANS[key] = plan  # the scalars passed their checks: numbers, so the key hashes
    return plan


def _tensor(name, value, dtype, shape, device, scalars):
    if not isinstance(value, _torch.Tensor):
        raise TypeError(f"{ENTRY}: {name} must be a torch.Tensor, got {type(value).__name__}")
    if value.device.type != _DEVICE_TYPE:
        raise ValueError(f"{ENTRY}: {name} is on {value.device}; the kernel takes CUDA tensors")
    if device is not None and value.device != device:
        raise ValueError(f"{ENTRY}: {name} is on {value.device}, the other tensors on {device}")
    if value.dtype != dtype:
        raise TypeError(f"{ENTRY}: {name} has dtype {value.dtype}, the kernel takes {dtype}")
    if tuple(value.shape) != tuple(shape):
        given = ", ".join(f"{k}={v}" for k, v in scalars.items())
        raise ValueError(f"{ENTRY}: {name} has shape {tuple(value.shape)}, expected {tuple(shape)} for {given}")
    if not value.is_contiguous():
        raise ValueError(f"{ENTRY}: {name} is not contiguous (row-major); pass {name}.contiguous()")
    return value.device


def _scalar(name, value, low, high):
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{ENTRY}: scalar {name} must be a number, got {type(value).__name__}")
    if low is not None and (not float(value).is_integer() or not low <= value <= high):
        raise ValueError(f"{ENTRY}: scalar {name} = {value} does not fit its type ({low}..{high})")
'''


def _literal(text: str) -> str:
    """The kernel source as a readable raw string where it can be one, else as repr() writes it."""
    if "'''" in text or text.endswith("\\") or "\r" in text:
        return repr(text)
    return "r'''" + text + "'''"


def _tuple(items: list[str]) -> str:
    return "(" + ", ".join(items) + ("," if len(items) == 1 else "") + ")"


def generate(src: ExportSource) -> str:
    """The module's text."""
    sig = src.signature
    scalars = [a for a in sig.scalars]
    names = src.names()
    shapes = src.shapes()
    inferred = src.inferred()
    sp = [py_name(a.name) for a in scalars]
    facts = [py_name(n) for n in DEVICE_NAMES]
    pointers = [a for a in sig.args if a.pointer]
    name = sig.name

    def shape_code(exprs: list[Expr]) -> str:
        return _tuple([f'_as_int({to_python(e, names)}, "shape")' for e in exprs])

    lines = [f'"""{name}: a kernel verified by cudaopt, as the PyTorch operator cudaopt::{name}.', "",
             *[f"{line}" for line in src.provenance.lines()], "", "Use:", f"    import this module; "
             f"{name}({', '.join(a.name for a in sig.inputs)}) returns "
             f"{', '.join(a.name for a in sig.outputs)}", f"    (or torch.ops.cudaopt.{name}(...) with every scalar; "
             f"torch.ops.cudaopt.{name}_out writes given outputs).", "",
             "Generated by `cudaopt export --to torch`; the kernel and launch are as verified: edit the experiment, "
             "not this file.", '"""', "",
             "import ctypes as _ctypes", "import functools as _functools", "import math as _math", "import threading as _threading", "",
             "import torch as _torch", "", f"ENTRY = {name!r}", f"SIGNATURE = {str(sig)!r}",
             f"KERNELS = {tuple(src.kernels)!r}", f"VERIFIED_ON_NUM_SMS = {src.num_sms}",
             f"KERNEL_SOURCE = {_literal(src.source)}", f"HEADER_LIBS = {HEADER_LIBS!r}",
             f"PRELUDE_NAME = {PRELUDE_NAME!r}", f"HOST_HEADERS = {HEADERS!r}", PY_HELPERS, _RUNTIME]
    params = ", ".join([*sp, *facts])
    lines += ["", *python_launch_config(src.launch, names, src.entry, params), "",
              f"def shapes({', '.join(sp)}):", '    """Every tensor argument\'s shape for these scalars."""',
              "    return {" + ", ".join(f"{a.name!r}: {shape_code(shapes[a.name])}" for a in pointers) + "}", ""]
    lines += _op_code(src, sp, inferred)
    return "\n".join(lines) + "\n"


def _op_code(src: ExportSource, sp: list[str], inferred: dict) -> list[str]:
    """The checks, the two custom ops with their fake implementations, and the Python entry point."""
    sig = src.signature
    name = sig.name
    ins, outs, scalars = sig.inputs, sig.outputs, sig.scalars
    if not ins or not outs:
        raise ExperimentError("--to", "torch", f"{name} needs at least one input (const T*) and one output (T*) "
                                               "to become an operator")
    for a in scalars:
        if a.dtype not in C_SCALARS:
            raise ExperimentError("--to", "torch", f"scalar {a.name} is {a.dtype}: the operator passes scalars of "
                                                   f"{', '.join(C_SCALARS)} only")
    p = py_name
    kind = lambda a: "SymInt" if a.dtype in SCALAR_RANGES else "float"
    alias = "abcdefghijklmnopqrstuvwxyz"
    schema_in = ", ".join([*(f"Tensor {p(a.name)}" for a in ins), *(f"{kind(a)} {p(a.name)}" for a in scalars)])
    schema_out = ", ".join([*(f"Tensor {p(a.name)}" for a in ins),
                            *(f"Tensor({alias[i % 26]}!) {p(a.name)}" for i, a in enumerate(outs)),
                            *(f"{kind(a)} {p(a.name)}" for a in scalars)])
    returns = "Tensor" if len(outs) == 1 else "(" + ", ".join("Tensor" for _ in outs) + ")"
    in_args = ", ".join([p(a.name) for a in ins] + sp)
    all_args = ", ".join([p(a.name) for a in ins] + [p(a.name) for a in outs] + sp)
    out_names = ", ".join(p(a.name) for a in outs)
    dt = lambda a: f"_torch.{TORCH_DTYPES[a.dtype]}"
    ctype = lambda a: (f"_ctypes.c_void_p({p(a.name)}.data_ptr())" if a.pointer
                       else f"_ctypes.{C_SCALARS[a.dtype]}(int({p(a.name)}))" if a.dtype in SCALAR_RANGES
                       else f"_ctypes.{C_SCALARS[a.dtype]}({p(a.name)})")
    first = p(ins[0].name)
    checked = [*ins, *outs]
    key = _tuple([f"{first}.device", *sp])  # what a plan is kept under
    lines = [f"def _prepare({all_args}):", '    """Every check of the arguments, then the launch planned for this device and these scalars."""',
             "    _device = None", "    _scalars = {" + ", ".join(f"{a.name!r}: {p(a.name)}" for a in scalars) + "}"]
    for a in scalars:
        low, high = SCALAR_RANGES.get(a.dtype, (None, None))
        lines.append(f"    _scalar({a.name!r}, {p(a.name)}, {low}, {high})")
    lines.append(f"    _expected = shapes({', '.join(sp)})")
    for a in checked:
        lines.append(f"    _device = _tensor({a.name!r}, {p(a.name)}, {dt(a)}, _expected[{a.name!r}], _device, "
                     "_scalars)")
    lines += [f"    if all(_t.numel() == 0 for _t in {_tuple([p(a.name) for a in outs])}):",
              "        return None  # nothing to write",
              f"    _config = launch_config({', '.join(sp + ['loaded(_device.index).num_sms'])})",
              f"    _plan = _Plan(_device, {_tuple([dt(a) for a in checked])}, "
              f"{_tuple([f'_expected[{a.name!r}]' for a in checked])}, _config, [{', '.join(ctype(a) for a in sig.args)}])",
              f"    return _remember({key}, _plan)", "", "",
              f"def _run({all_args}):", '    """Check every argument, then launch on the current stream (a call like an '
              'earlier one checks only its tensors)."""',
              "    try:",
              f"        _plan = _PLANS[{key}]",
              "        _ready = (" + " and ".join(
                  [f"{p(a.name)}.dtype is _plan.dtypes[{i}]" for i, a in enumerate(checked)]
                  + [f"{p(a.name)}.shape == _plan.shapes[{i}]" for i, a in enumerate(checked)]
                  + [f"{p(a.name)}.device == _plan.device" for a in checked[1:]]
                  + [f"{p(a.name)}.is_contiguous()" for a in checked]) + ")",
              "    except (KeyError, TypeError, AttributeError):  # not planned yet, or not tensors: the full checks say",
              "        _ready = False",
              "    if not _ready:",
              f"        _plan = _prepare({all_args})",
              "        if _plan is None:",
              "            return",
              "    _slots = _plan.slots",
              "    with _plan.lock:",
              *[f"        _slots[{i}].value = {p(a.name)}.data_ptr()" for i, a in enumerate(x for x in sig.args if x.pointer)],
              "        _plan.launch()", "", ""]
    lines += [
              f"def _op({in_args}):", f"    _expected = shapes({', '.join(sp)})"]
    lines += [f"    {p(a.name)} = _torch.empty(_expected[{a.name!r}], dtype={dt(a)}, device={first}.device)"
              for a in outs]
    lines += [f"    _run({all_args})", f"    return {out_names}",
              "", "", f"def _op_fake({in_args}):", f"    _expected = shapes({', '.join(sp)})",
              "    return " + ", ".join(f"{first}.new_empty(_expected[{a.name!r}], dtype={dt(a)})" for a in outs),
              "", "", f"def _op_out({all_args}):", f"    _run({all_args})", "", "",
              f"def _op_out_fake({all_args}):", "    return None", "", "",
              "# imported again (a notebook, an evaluation loading the file per trial): the first registration stays",
              f"if not hasattr(_torch.ops.cudaopt, {name!r}):",
              f'    _torch.library.custom_op("cudaopt::{name}", _op, mutates_args=(),',
              f'                             schema="({schema_in}) -> {returns}").register_fake(_op_fake)',
              f'    _torch.library.custom_op("cudaopt::{name}_out", _op_out, '
              f'mutates_args={tuple(p(a.name) for a in outs)!r},',
              f'                             schema="({schema_out}) -> ()").register_fake(_op_out_fake)', "", ""]
    taken = {p(a.name) for a in sig.args}
    out_kw = "out" if "out" not in taken else "outputs"
    keywords = [f"{p(a.name)}=None" if a.name in inferred else p(a.name) for a in scalars]
    params = [p(a.name) for a in ins] + ["*", *keywords, f"{out_kw}=None"]
    read = ", ".join(f"{s} = {i}.shape[{d}]" for s, (i, d) in inferred.items()) or "none"
    lines += [f"def {name}({', '.join(params)}):",
              f'    """Returns {", ".join(a.name for a in outs)} (a tuple when several), or writes them into '
              f'``{out_kw}``. Scalars read off the inputs\' shapes may be left out ({read})."""']
    lines += [f"    {p(s)} = {p(i)}.shape[{d}] if {p(s)} is None else {p(s)}" for s, (i, d) in inferred.items()]
    lines += [f"    if {out_kw} is None:", f"        return _torch.ops.cudaopt.{name}({in_args})",
              f"    {out_names}{',' if len(outs) == 1 else ''} = {out_kw} if isinstance({out_kw}, (tuple, list)) "
              f"else ({out_kw},)",
              "    if _torch.compiler.is_compiling() or not (" + " and ".join(
                  f"type({p(a.name)}) in _PLAIN" for a in checked) + "):",
              f"        _torch.ops.cudaopt.{name}_out({all_args})  # traced, or a tensor subclass: the registered op",
              "    else:  # eager on plain tensors: straight to the launch, without the dispatcher's cost per call",
              f"        _run({all_args})",
              f"        _BUMP({_tuple([p(a.name) for a in outs])})  # the outputs' version counters, as the op bumps them",
              f"    return {out_kw}"]
    return lines
