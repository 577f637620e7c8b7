"""What one kernel can leave on the GPU for the next: shared memory, registers, local memory, and
L2 lines kept by hints.

Shared memory, registers and local memory are not cleared between kernels. A block that lands where an earlier
kernel ran (the reference, a vendor, the candidate's own earlier launch on the same inputs) can
read what that kernel left, so a kernel that reads shared memory it never wrote may pass a check
by luck, or by design (a memo table that escapes the device-global limit). Before every launch
of a candidate (the checks, the warm-ups, the timed launches: outside the timed interval) the
harness fills every SM's shared memory with a NaN pattern (:data:`SHARED_POISON`), the reserved
first part of the block window included, overwrites its register file with values derived from
it, and writes the pattern over every thread's local memory: a frame at least as large as the
candidate's largest (its stack frames as ptxas reports them), in every thread slot of every SM. Local memory is what a kernel's frames (arrays it indexes, spills) live in, and a thread
on a persistent grid lands in the same slot launch after launch; without the wipe, answers left
there by one launch could be returned by the next.

L2 lines can be kept past a flush only with a priority: the persisting set-aside, a host-side
limit a kernel cannot change, is set to zero when the worker starts; and before each L2 flush the
case's buffers are set back to normal eviction priority, so lines a kernel loaded with an
``evict_last`` policy leave with the flush and every timed launch pays its DRAM traffic.
"""

from __future__ import annotations

import io
from importlib import resources

import numpy as np

from .device import Device
from .driver import allow_dynamic_shared

# A float32 NaN (and, twice over, a float64 NaN; its upper half a float16/bfloat16 NaN) that differs
# from the output poison and the guard pattern, and as an integer a huge index.
SHARED_POISON = 0x7FF5A5A5
_RANGE = np.dtype([("ptr", "<u8"), ("bytes", "<u8")])  # leftovers.cu's CudaoptRange


class Leftovers:
    """The worker's wipes of shared memory, registers and pinned L2 lines (leftovers.cu); the real
    :class:`device.Wipes`, made by :meth:`gpu.Gpu.leftovers`."""

    def __init__(self, gpu: Device):
        from cuda.core import Program, ProgramOptions

        self.gpu = gpu
        source = resources.files(__package__).joinpath("leftovers.cu").read_text()
        options = ProgramOptions(arch=gpu.arch, std="c++17")
        module = Program(source, "c++", options).compile("cubin", logs=io.StringIO())
        self._poison = module.get_kernel("cudaopt_poison_shared")
        self._registers = module.get_kernel("cudaopt_poison_registers")
        self._demote = module.get_kernel("cudaopt_demote_l2")
        self._source = source
        self._local: dict[int, object] = {}  # the local-memory wipe, by words per thread
        self.local_words = 0
        self.cover_local(0)
        self.sm_count = int(gpu.props.multiprocessor_count)
        self.shared_bytes = int(gpu.props.max_shared_memory_per_block_optin)
        allow_dynamic_shared(self._poison, self.shared_bytes, gpu.device.device_id)
        self.persisting_l2_bytes = no_persisting_l2()

    def poison(self, seen: int = 0) -> None:
        """Fill every SM's shared memory with the poison and overwrite its registers (stream-ordered);
        ``seen``: the device address of zeroed words in which the bit of each SM id (``%smid``) whose
        shared memory was filled is set (32 words cover ids up to 1023)."""
        from cuda.core import LaunchConfig, launch

        launch(self.gpu.stream, LaunchConfig(grid=2 * self.sm_count, block=512), self._registers,
               np.uint32(SHARED_POISON), np.int32(1), np.uint64(0))
        self.poison_local()
        config = LaunchConfig(grid=self.sm_count, block=1024, shmem_size=self.shared_bytes)
        launch(self.gpu.stream, config, self._poison, np.uint32(SHARED_POISON), np.uint32(self.shared_bytes // 4),
               np.uint64(seen))

    def cover_local(self, frame_bytes: int) -> None:
        """From now on, wipe a local-memory frame of at least ``frame_bytes`` per thread (a power of
        two, at least 1 KiB, never less than before in this worker): a frame as large as the
        candidate's, or larger, reaches what the candidate's frames left (measured by
        benchmarks/local_memory_probe.py; a smaller one does not)."""
        window = 1 << (max(1024, frame_bytes) - 1).bit_length()
        self.local_words = max(self.local_words, window // 4)

    def poison_local(self) -> None:
        """Write the poison over every thread slot's local memory (stream-ordered)."""
        from cuda.core import LaunchConfig, launch

        kernel = self._local_kernel(self.local_words)
        blocks = kernel.occupancy.max_active_blocks_per_multiprocessor(1024, 0)
        launch(self.gpu.stream, LaunchConfig(grid=max(1, blocks) * self.sm_count, block=1024), kernel,
               np.uint32(SHARED_POISON), np.uint64(0))

    def _local_kernel(self, words: int):
        if words not in self._local:
            from cuda.core import Program, ProgramOptions

            options = ProgramOptions(arch=self.gpu.arch, std="c++17", define_macro=[("CUDAOPT_LOCAL_WORDS", str(words))])
            module = Program(self._source, "c++", options).compile("cubin", logs=io.StringIO())
            self._local[words] = module.get_kernel("cudaopt_poison_local")
        return self._local[words]

    def range_table(self, ranges: list[tuple[int, int]]):
        """A device table of (address, bytes) ranges for :meth:`demote_l2`; the caller closes it."""
        table = np.zeros(len(ranges), dtype=_RANGE)
        for row, (ptr, nbytes) in zip(table, ranges, strict=True):
            row["ptr"], row["bytes"] = ptr - ptr % 128, nbytes + ptr % 128
        buffer = self.gpu.alloc(table.nbytes)
        self.gpu.upload(int(buffer.handle), table)
        return buffer, len(table)

    def demote_l2(self, table) -> None:
        """Set every L2 line of the table's ranges back to normal eviction priority (stream-ordered)."""
        from cuda.core import LaunchConfig, launch

        buffer, count = table
        if count:
            launch(self.gpu.stream, LaunchConfig(grid=self.sm_count * 4, block=256), self._demote,
                   np.uint64(int(buffer.handle)), np.int32(count))


def no_persisting_l2() -> int:
    """Set the L2 set-aside for persisting accesses to zero and reset lines still persisting;
    return the set-aside in force (non-zero only where the driver refuses the change, as under MPS)."""
    from cuda.bindings import driver

    limit = driver.CUlimit.CU_LIMIT_PERSISTING_L2_CACHE_SIZE
    (err,) = driver.cuCtxSetLimit(limit, 0)
    if err != driver.CUresult.CUDA_SUCCESS:  # no set-aside on this GPU (or under MIG), or one we may not change
        err, value = driver.cuCtxGetLimit(limit)
        return int(value) if err == driver.CUresult.CUDA_SUCCESS else 0
    driver.cuCtxResetPersistingL2Cache()
    return 0

