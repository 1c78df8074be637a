import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def l2_normalize_kernel(x_ptr, out_ptr, R, inner, BLOCK: tl.constexpr):
    """out = x / ||x||_2 over R elements spaced `inner` apart: x is viewed as (outer, R, inner),
    one program per (outer, inner) pair (a contiguous row when inner is 1)."""
    pid = tl.program_id(0).to(tl.int64)
    base = (pid // inner) * R * inner + pid % inner
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, R, BLOCK):
        r = start + cols
        x = tl.load(x_ptr + base + r.to(tl.int64) * inner, mask=r < R, other=0.0)
        acc += x * x
    norm = tl.sqrt(tl.sum(acc, axis=0))
    for start in range(0, R, BLOCK):
        r = start + cols
        mask = r < R
        offs = base + r.to(tl.int64) * inner
        x = tl.load(x_ptr + offs, mask=mask, other=0.0)
        tl.store(out_ptr + offs, x / norm, mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # The norm is taken over dimension 1, as the reference: (outer, R, inner) = (d0, d1, the rest).
        x = x.contiguous()
        R = x.shape[1]
        inner = math.prod(x.shape[2:])
        out = torch.empty_like(x)
        l2_normalize_kernel[(x.shape[0] * inner,)](x, out, R, inner, BLOCK=1024)
        return out
