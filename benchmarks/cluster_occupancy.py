"""How many thread block clusters of each size this GPU runs at once, at 1, 2 and 4 blocks per SM.

A split-K kernel that puts the blocks of one output tile in a cluster (the SGEMM example's
splitk_gemm) needs every cluster of its launch resident at once to finish in one wave; a cluster
must fit in one GPC, so the count is not the SMs divided by the cluster size (H200, 132 SMs: 30
clusters of 4 and 15 of 8 at one block per SM, not 33 and 16). Asks the driver
(cuOccupancyMaxActiveClusters) for a trivial kernel whose dynamic shared memory sets the blocks per
SM; cluster 16 is non-portable and allowed on the kernel. Run: ``python
benchmarks/cluster_occupancy.py``.
"""

from __future__ import annotations

import cupy as cp
from cuda.bindings import driver

SOURCE = r'''extern "C" __global__ void occupy(float* p)
{
    extern __shared__ float s[];
    s[threadIdx.x] = 1.0f;
    __syncthreads();
    if (p) p[threadIdx.x] = s[threadIdx.x ^ 1];
}'''
PER_SM = {1: 120_000, 2: 100_000, 4: 50_000}  # blocks per SM: the dynamic shared memory that allows them
CLUSTERS = (1, 2, 4, 8, 16)


def _check(result) -> None:
    if result[0] != driver.CUresult.CUDA_SUCCESS:
        raise SystemExit(f"CUDA driver call failed: {result[0].name}")


def main() -> None:
    kernel = cp.RawModule(code=SOURCE).get_function("occupy")
    function = driver.CUfunction(getattr(kernel, "kernel", kernel).ptr)
    attribute = driver.CUfunction_attribute
    _check(driver.cuFuncSetAttribute(function, attribute.CU_FUNC_ATTRIBUTE_NON_PORTABLE_CLUSTER_SIZE_ALLOWED, 1))
    _check(driver.cuFuncSetAttribute(function, attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES,
                                     max(PER_SM.values())))
    properties = cp.cuda.runtime.getDeviceProperties(0)
    sms = properties["multiProcessorCount"]
    print(f"{properties['name'].decode()}: {sms} SMs, 256 threads per block")
    for per_sm, smem in PER_SM.items():
        for size in CLUSTERS:
            config = driver.CUlaunchConfig()
            config.gridDimX, config.gridDimY, config.gridDimZ = size * 64, 1, 1
            config.blockDimX, config.blockDimY, config.blockDimZ = 256, 1, 1
            config.sharedMemBytes = smem
            cluster = driver.CUlaunchAttribute()
            cluster.id = driver.CUlaunchAttributeID.CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
            cluster.value.clusterDim.x, cluster.value.clusterDim.y, cluster.value.clusterDim.z = size, 1, 1
            config.attrs, config.numAttrs = [cluster], 1
            result = driver.cuOccupancyMaxActiveClusters(function, config)
            _check(result)
            active = result[1]
            print(f"{per_sm} block(s) per SM, clusters of {size:2d}: {active:3d} at once = {active * size:3d} blocks "
                  f"({active * size / (per_sm * sms):.0%} of the block slots)")


if __name__ == "__main__":
    main()
