// Empty kernel with a different signature on purpose; used to measure launch overhead.
extern "C" __global__ void empty_kernel() {}
