"""A legitimate CUDA candidate that compiles lazily inside a helper and names its function `relu`."""
import torch
import torch.nn as nn
from torch.utils import cpp_extension

CUDA_SRC = r'''
#include <torch/extension.h>
__global__ void relu_kernel(const float* __restrict__ x, float* __restrict__ y, long n) {
    long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}
torch::Tensor relu(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_kernel<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
'''
CPP_SRC = "torch::Tensor relu(torch::Tensor x);"

_module = None


def _ext():
    global _module
    if _module is None:
        _module = cpp_extension.load_inline("lazy_relu", CPP_SRC, cuda_sources=CUDA_SRC, functions=["relu"])
    return _module


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _ext().relu(x.contiguous())
