// Adversarial (host files through the compiler): NVRTC opens any file an #include names, and the
// compile log quotes it. This one asks for the worker's environment, where API keys live.
#include "/proc/self/environ"
extern "C" __global__ void matmul_f32(const float* a, const float* b, float* c, int m, int n, int k)
{
}
