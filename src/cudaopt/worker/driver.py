"""Raw CUDA Driver API calls (``cuda.bindings``) and what their errors mean for the worker.

Kept apart from gpu.py so that the pieces of the real device (the GPU, the locked answer memory,
the leftover wipes) can share them without importing each other.
"""

from __future__ import annotations

# CUDA errors after which the context is unusable: the worker must be retired.
STICKY_ERRORS = (
    "CUDA_ERROR_ILLEGAL_ADDRESS",
    "CUDA_ERROR_LAUNCH_FAILED",
    "CUDA_ERROR_ILLEGAL_INSTRUCTION",
    "CUDA_ERROR_MISALIGNED_ADDRESS",
    "CUDA_ERROR_INVALID_ADDRESS_SPACE",
    "CUDA_ERROR_INVALID_PC",
    "CUDA_ERROR_HARDWARE_STACK_ERROR",
    "CUDA_ERROR_ASSERT",
    "CUDA_ERROR_LAUNCH_TIMEOUT",
    "CUDA_ERROR_ECC_UNCORRECTABLE",
    "CUDA_ERROR_CONTEXT_IS_DESTROYED",
    "CUDA_ERROR_ILLEGAL_STATE",
    "CUDA_ERROR_UNKNOWN",
)

DEFAULT_SHARED_LIMIT = 48 * 1024  # dynamic shared memory a kernel may use without opting in


class CudaCallError(RuntimeError):
    """A failed CUDA call (:func:`is_sticky` tells whether the context can still be used)."""


def is_sticky(message: str) -> bool:
    return any(name in message for name in STICKY_ERRORS)


def _driver():
    from cuda.bindings import driver

    return driver


def call(name: str, *args):
    """Call a Driver API function and raise :class:`CudaCallError` on failure."""
    driver = _driver()
    result = getattr(driver, name)(*args)
    err = result[0] if isinstance(result, tuple) else result
    if err != driver.CUresult.CUDA_SUCCESS:
        _, err_name = driver.cuGetErrorName(err)
        _, err_text = driver.cuGetErrorString(err)
        raise CudaCallError(f"{name}: {err_name.decode()}: {err_text.decode()}")
    if isinstance(result, tuple):
        return result[1] if len(result) == 2 else result[1:]
    return None


def allow_dynamic_shared(kernel, nbytes: int, device_id: int) -> None:
    """Let ``kernel`` (a cuda-core Kernel) use ``nbytes`` of dynamic shared memory, above the default."""
    from cuda.bindings import driver

    attr = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    handle = kernel.handle
    if isinstance(handle, driver.CUkernel):
        (err,) = driver.cuKernelSetAttribute(attr, nbytes, handle, device_id)
    else:
        (err,) = driver.cuFuncSetAttribute(handle, attr, nbytes)
    if err != driver.CUresult.CUDA_SUCCESS:
        _, name = driver.cuGetErrorName(err)
        raise CudaCallError(f"cannot allow {nbytes} bytes of dynamic shared memory: {name.decode()}")
