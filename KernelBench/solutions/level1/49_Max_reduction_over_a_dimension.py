import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def max_dim_kernel(x_ptr, out_ptr, R, inner, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """x viewed as a contiguous (outer, R, inner): out[o, j] = max over r of x[o, r, j].
    One program per (o, block of BLOCK_C columns j); the reduced dimension is read BLOCK_R rows at a time."""
    o = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    rows = tl.arange(0, BLOCK_R)
    col_mask = cols < inner
    base = x_ptr + o * R * inner
    acc = tl.full((BLOCK_R, BLOCK_C), float("-inf"), tl.float32)
    for start in range(0, R, BLOCK_R):
        r = start + rows
        mask = (r[:, None] < R) & col_mask[None, :]
        x = tl.load(base + r[:, None].to(tl.int64) * inner + cols[None, :], mask=mask, other=float("-inf"))
        acc = tl.maximum(acc, x)
    tl.store(out_ptr + o * inner + cols, tl.max(acc, axis=0), mask=col_mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        R = x.shape[dim]
        outer, inner = math.prod(x.shape[:dim]), math.prod(x.shape[dim + 1:])
        out_shape = x.shape[:dim] + x.shape[dim + 1:]
        out = torch.empty(out_shape, device=x.device, dtype=x.dtype)
        # Wide tiles across the kept columns; when few columns remain (reducing the last dimension),
        # the tile turns to run along the reduced one instead.
        block_c = min(64, triton.next_power_of_2(inner))
        block_r = max(32, 2048 // block_c)
        grid = (outer, triton.cdiv(inner, block_c))
        max_dim_kernel[grid](x, out, R, inner, BLOCK_R=block_r, BLOCK_C=block_c)
        return out
