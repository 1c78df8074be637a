import math

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, eps, BLOCK: tl.constexpr):
    """One program per row of a contiguous (rows, N) view, N being the normalised trailing
    elements (all of a sample here): mean, then variance, then the affine output."""
    row = tl.program_id(0).to(tl.int64)
    x_row = x_ptr + row * N
    out_row = out_ptr + row * N
    cols = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, N, BLOCK):
        acc += tl.load(x_row + start + cols, mask=start + cols < N, other=0.0)
    mean = tl.sum(acc, axis=0) / N
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, N, BLOCK):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0)
        d = tl.where(mask, x - mean, 0.0)
        acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / N + eps)
    for start in range(0, N, BLOCK):
        mask = start + cols < N
        x = tl.load(x_row + start + cols, mask=mask, other=0.0)
        w = tl.load(w_ptr + start + cols, mask=mask, other=0.0)
        b = tl.load(b_ptr + start + cols, mask=mask, other=0.0)
        tl.store(out_row + start + cols, (x - mean) * rstd * w + b, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, normalized_shape: tuple):
        super().__init__()
        # Parameter holder: weight and bias (created as the reference creates them) and eps.
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N = math.prod(self.ln.normalized_shape)  # the trailing dimensions normalised together
        rows = x.numel() // N
        out = torch.empty_like(x)
        layer_norm_kernel[(rows,)](
            x, self.ln.weight.contiguous(), self.ln.bias.contiguous(), out, N, self.ln.eps, BLOCK=1024,
        )
        return out
