import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _add(a, b):
    return a + b


@triton.jit
def cumsum_rows_kernel(x_ptr, out_ptr, R, BLOCK: tl.constexpr):
    """Inclusive scan of one contiguous row of R elements, BLOCK at a time with a running carry."""
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK)
    carry = tl.sum(tl.zeros((BLOCK,), tl.float32), axis=0)
    for start in range(0, R, BLOCK):
        mask = start + cols < R
        x = tl.load(x_ptr + row * R + start + cols, mask=mask, other=0.0)
        scanned = tl.associative_scan(x, 0, _add) + carry
        tl.store(out_ptr + row * R + start + cols, scanned, mask=mask)
        carry += tl.sum(x, axis=0)


@triton.jit
def cumsum_columns_kernel(x_ptr, out_ptr, R, inner, BLOCK_C: tl.constexpr):
    """x viewed as (outer, R, inner) with inner > 1: each program runs down R for BLOCK_C adjacent
    columns, one running sum per column."""
    o = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    mask = cols < inner
    base = o * R * inner + cols
    carry = tl.zeros((BLOCK_C,), tl.float32)
    for r in range(0, R):
        offs = base + r * inner
        carry += tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, carry, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        dim = self.dim % x.dim()
        R = x.shape[dim]
        outer, inner = math.prod(x.shape[:dim]), math.prod(x.shape[dim + 1:])
        out = torch.empty_like(x)
        if inner == 1:  # the scanned dimension is the last one: contiguous rows
            cumsum_rows_kernel[(outer,)](x, out, R, BLOCK=1024)
        else:
            block_c = min(128, triton.next_power_of_2(inner))
            cumsum_columns_kernel[(outer, triton.cdiv(inner, block_c))](x, out, R, inner, BLOCK_C=block_c)
        return out
