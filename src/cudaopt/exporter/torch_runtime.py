"""The runtime of a ``--to torch`` module: compiling and loading the kernel on a device, the launch
plans, and the checks of a call's arguments, as Python text copied into every export (which
imports nothing from cudaopt). It uses the names the module defines before it: ``ENTRY``,
``KERNELS``, ``KERNEL_SOURCE``, ``HOST_HEADERS``, ``PRELUDE_NAME``, ``HEADER_LIBS`` and the
imports ``_torch``, ``_ctypes``, ``_functools``, ``_numbers``, ``_threading``.
"""

RUNTIME = '''
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
        # the target the harness compiled for (compilekit.target.target_arch; this text imports no cudaopt)
        arch = f"sm_{props.major}{props.minor}" + ("a" if props.major >= 9 else "")
        self.cubin = compile_cubin(arch, self.num_sms)
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


def _scalar(name, value, low, high, ctype):
    if isinstance(value, bool) or not isinstance(value, _numbers.Real):
        raise TypeError(f"{ENTRY}: scalar {name} must be a number ({ctype}), got {type(value).__name__}")
    if low is not None and ((isinstance(value, float) and not value.is_integer()) or not low <= value <= high):
        raise ValueError(f"{ENTRY}: scalar {name} = {value} does not fit its type ({ctype}: {low}..{high})")


def _sizes(expected, scalars):
    """Every shape of the call: a negative size (a scalar below 0) is refused before anything is allocated."""
    for name, shape in expected.items():
        if any(size < 0 for size in shape):
            given = ", ".join(f"{k}={v}" for k, v in scalars.items())
            raise ValueError(f"{ENTRY}: {name} would have the shape {tuple(shape)} for {given}: sizes must not be "
                             "negative")
    return expected


def _planned(key):
    """Whether a call on this device with these scalars was planned before (its scalars passed their checks)."""
    try:
        return key in _PLANS
    except TypeError:  # an unhashable scalar: never planned
        return False


def _argument(name, value, rank, dims):
    """A tensor argument of the kernel's rank (its dtype, device, shape and layout are checked before the launch)."""
    if not isinstance(value, _torch.Tensor):
        raise TypeError(f"{ENTRY}: {name} must be a torch.Tensor of shape ({dims}), got {type(value).__name__}")
    if value.dim() != rank:
        raise ValueError(f"{ENTRY}: {name} must be a {rank}-D tensor of shape ({dims}), got a {value.dim()}-D tensor "
                         f"of shape {tuple(value.shape)}")


def _outputs(out, names, keyword):
    """``out`` as the output tensors: one tensor, or a tuple or list of one per output."""
    given = tuple(out) if isinstance(out, (tuple, list)) else (out,)
    if len(given) != len(names):
        raise ValueError(f"{ENTRY}: {keyword} must hold {len(names)} tensor(s) ({', '.join(names)}), got {len(given)}")
    return given


def _no_grad(tensors, keyword):
    """A call that writes into given outputs is not differentiable: refused, as torch.matmul(out=...) refuses
    it, when grad mode is on and an argument requires grad."""
    if _torch.is_grad_enabled() and any(t.requires_grad for t in tensors.values()):
        names = ", ".join(name for name, t in tensors.items() if t.requires_grad)
        raise RuntimeError(f"{ENTRY}(): functions with {keyword}=... arguments don't support automatic "
                           f"differentiation, but one of the arguments requires grad ({names})")
'''
