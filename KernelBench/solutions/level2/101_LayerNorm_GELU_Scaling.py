import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def layer_norm_gelu_scale_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, eps, scale, BLOCK: tl.constexpr):
    """One program per row: LayerNorm, exact GELU and scaling fused into the final pass."""
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
        y = (x - mean) * rstd * w + b
        y = 0.5 * y * (1.0 + tl.erf(y * 0.7071067811865476))
        tl.store(out_row + start + cols, y * scale, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, hidden: int, scaling_factor: float):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)  # parameter holder
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N = x.shape[-1]
        rows = x.numel() // N
        out = torch.empty_like(x)
        layer_norm_gelu_scale_kernel[(rows,)](
            x, self.norm.weight, self.norm.bias, out, N, self.norm.eps, float(self.scaling_factor), BLOCK=1024,
        )
        return out
