import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def fir_kernel(x_ptr, k_ptr, out_ptr, N, K, BLOCK: tl.constexpr, TAPS: tl.constexpr):
    """BLOCK outputs of one row: out[i] = sum_j x[i + j - K // 2] * k[j], zeros outside the row.
    TAPS taps at a time, as a (BLOCK, TAPS) tile whose overlapping loads the cache serves."""
    row = tl.program_id(1).to(tl.int64)
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    x_row = x_ptr + row * N
    pad = K // 2
    acc = tl.zeros((BLOCK,), tl.float32)
    for j0 in range(0, K, TAPS):
        j = j0 + tl.arange(0, TAPS)
        taps = tl.load(k_ptr + j, mask=j < K, other=0.0)
        src = offs[:, None] + (j[None, :] - pad)
        x = tl.load(x_row + src, mask=(src >= 0) & (src < N) & (j[None, :] < K), other=0.0)
        acc += tl.sum(x * taps[None, :], axis=1)
    tl.store(out_ptr + row * N + offs, acc, mask=offs < N)


class ModelNew(nn.Module):
    def __init__(self, kernel_size: int = 127):
        super().__init__()
        self.kernel_size = kernel_size
        # Drawn as the reference draws it, so one seed gives both the same taps.
        self.register_buffer("kernel", torch.randn(1, 1, kernel_size))

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        signal = signal.contiguous()
        n = signal.shape[-1]
        rows = signal.numel() // n if n else 0
        out = torch.empty_like(signal)
        fir_kernel[(triton.cdiv(n, 256), rows)](signal, self.kernel.contiguous(), out, n, self.kernel_size, BLOCK=256, TAPS=32)
        return out
