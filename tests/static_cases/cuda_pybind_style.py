"""A legitimate CUDA candidate in the style of AI-CUDA-Engineer outputs: PYBIND11_MODULE, dispatch
macros, a host function named `forward`, weights kept in an nn.Linear holder."""
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_source = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAGuard.h>

template <typename scalar_t>
__global__ void __launch_bounds__(256) linear_relu_kernel(
        const scalar_t* __restrict__ x, const scalar_t* __restrict__ w, const scalar_t* __restrict__ b,
        scalar_t* __restrict__ y, int batch, int in_f, int out_f) {
    int row = blockIdx.y;
    int col = blockIdx.x * blockDim.x + threadIdx.x;
    if (row >= batch || col >= out_f) return;
    scalar_t acc = b[col];
    for (int k = 0; k < in_f; ++k) acc += x[row * in_f + k] * w[col * in_f + k];
    y[row * out_f + col] = acc > scalar_t(0) ? acc : scalar_t(0);
}

torch::Tensor forward(torch::Tensor x, torch::Tensor w, torch::Tensor b) {
    TORCH_CHECK(x.is_cuda(), "x must be a CUDA tensor");
    const at::cuda::OptionalCUDAGuard guard(device_of(x));
    auto y = at::empty({x.size(0), w.size(0)}, x.options());
    dim3 block(256);
    dim3 grid((w.size(0) + 255) / 256, x.size(0));
    AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "linear_relu", ([&] {
        linear_relu_kernel<scalar_t><<<grid, block, 0, at::cuda::getCurrentCUDAStream()>>>(
            x.data_ptr<scalar_t>(), w.data_ptr<scalar_t>(), b.data_ptr<scalar_t>(), y.data_ptr<scalar_t>(),
            x.size(0), x.size(1), w.size(0));
    }));
    C10_CUDA_KERNEL_LAUNCH_CHECK();
    return y;
}

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
    m.def("forward", &forward, "fused linear + relu (CUDA)");
}
"""

fused = load_inline(name="fused_linear_relu", cpp_sources="", cuda_sources=cuda_source, extra_cuda_cflags=["-O3"])


class ModelNew(nn.Module):
    def __init__(self, in_features: int, out_features: int):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)  # parameter holder only

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return fused.forward(x.contiguous(), self.linear.weight, self.linear.bias)
