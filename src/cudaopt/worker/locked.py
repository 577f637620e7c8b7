"""Device memory that no kernel can touch unless the host opens it (the virtual memory API).

The answer key lives here (answers.py): mapped, and made inaccessible (``PROT_NONE``) whenever it
is not being compared, so a kernel that reads or writes it faults, however it found the address.
"""

from __future__ import annotations

from .driver import call


class LockedMemory:
    """``size`` bytes (``nbytes`` rounded up to the granularity) at ``ptr``, created inaccessible."""

    def __init__(self, device_id: int, nbytes: int):
        from cuda.bindings import driver

        self.device_id = device_id
        prop = driver.CUmemAllocationProp()
        prop.type = driver.CUmemAllocationType.CU_MEM_ALLOCATION_TYPE_PINNED
        prop.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        prop.location.id = device_id
        granularity = call("cuMemGetAllocationGranularity", prop,
                           driver.CUmemAllocationGranularity_flags.CU_MEM_ALLOC_GRANULARITY_MINIMUM)
        self.size = max(1, -(-nbytes // granularity)) * granularity
        self.ptr = int(call("cuMemAddressReserve", self.size, 0, 0, 0))
        self._handle = call("cuMemCreate", self.size, prop, 0)
        call("cuMemMap", self.ptr, self.size, 0, self._handle, 0)

    def set_readable(self, readable: bool) -> None:
        """Open (read/write) or close (no access) the mapping for every kernel."""
        from cuda.bindings import driver

        flags = driver.CUmemAccess_flags
        desc = driver.CUmemAccessDesc()
        desc.location.type = driver.CUmemLocationType.CU_MEM_LOCATION_TYPE_DEVICE
        desc.location.id = self.device_id
        desc.flags = flags.CU_MEM_ACCESS_FLAGS_PROT_READWRITE if readable else flags.CU_MEM_ACCESS_FLAGS_PROT_NONE
        call("cuMemSetAccess", self.ptr, self.size, [desc], 1)

    def free(self) -> None:
        call("cuMemUnmap", self.ptr, self.size)
        call("cuMemRelease", self._handle)
        call("cuMemAddressFree", self.ptr, self.size)
