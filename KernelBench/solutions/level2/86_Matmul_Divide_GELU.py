import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_epilogue_kernel(
    x_ptr, w_ptr, bias_ptr, out_ptr, M, N, K,
    stride_xm, stride_xk, stride_wn, stride_wk, stride_om, stride_on, p1, p2,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
):
    """out = epilogue(x @ w.T + bias), with w in nn.Linear's (out_features, in_features) layout."""
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(
            x_ptr + offs_m[:, None] * stride_xm + k[None, :] * stride_xk,
            mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0,
        )
        b = tl.load(
            w_ptr + k[:, None] * stride_wk + offs_n[None, :] * stride_wn,
            mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0,
        )
        acc = tl.dot(a, b, acc, input_precision="ieee")  # full fp32, not TF32
    bias = tl.load(bias_ptr + offs_n, mask=offs_n < N, other=0.0)
    y = acc + bias[None, :]
    y = y / p1
    y = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
    out_mask = (offs_m[:, None] < M) & (offs_n[None, :] < N)
    tl.store(out_ptr + offs_m[:, None] * stride_om + offs_n[None, :] * stride_on, y, mask=out_mask)


class ModelNew(nn.Module):
    def __init__(self, input_size: int, output_size: int, divisor: float):
        super().__init__()
        # Parameters are created in Model's order so the seeded init gives the same values.
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        w = self.linear.weight
        bias = self.linear.bias.reshape(-1)
        M, K = x.shape
        N = w.shape[0]
        out = torch.empty((M, N), device=x.device, dtype=torch.float32)
        grid = (triton.cdiv(M, 64), triton.cdiv(N, 64))
        linear_epilogue_kernel[grid](
            x, w, bias, out, M, N, K,
            x.stride(0), x.stride(1), w.stride(0), w.stride(1), out.stride(0), out.stride(1),
            float(self.divisor), 0.0,
            BLOCK_M=64, BLOCK_N=64, BLOCK_K=32,
        )
        return out
