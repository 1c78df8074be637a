import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def cumsum_rows_kernel(x_ptr, out_ptr, N, stride_x, stride_out, BLOCK: tl.constexpr):
    """Inclusive scan of one row, BLOCK elements at a time with a running carry."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    carry = tl.sum(tl.zeros((BLOCK,), tl.float32), axis=0)
    for start in range(0, N, BLOCK):
        mask = start + cols < N
        x = tl.load(x_ptr + row * stride_x + start + cols, mask=mask, other=0.0)
        scanned = tl.associative_scan(x, 0, _add) + carry
        tl.store(out_ptr + row * stride_out + start + cols, scanned, mask=mask)
        carry += tl.sum(x, axis=0)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        if dim not in (1, -1):
            raise ValueError("this kernel scans the last dimension of a 2-D input")
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        M, N = x.shape
        out = torch.empty_like(x)
        cumsum_rows_kernel[(M,)](x, out, N, x.stride(0), out.stride(0), BLOCK=1024)
        return out
