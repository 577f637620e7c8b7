"""The trusted reference: PyTorch in FP32 from the BF16 inputs, rounded to BF16 once.

x @ W^T + b is computed in float32 (the harness turns TF32 off for the call, so the product is
full FP32), the tanh-form GELU in float32, and the result rounded to bfloat16 once: the value a
kernel with FP32 accumulation and an FP32 epilogue should produce, give or take one BF16 step.
"""

import torch
import torch.nn.functional as F


def linear_gelu_bf16(x, W, b, *, m, n, k):
    z = F.linear(x.float(), W.float(), b.float())
    return F.gelu(z, approximate="tanh").to(torch.bfloat16)
