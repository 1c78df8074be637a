import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def mean_dim1_kernel(x_ptr, out_ptr, D1, D2, stride_b, stride_d1, stride_d2,
                      BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """out[b, j] = mean over i of x[b, i, j]; one program per (b, block of j)."""
    b = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)
    rows = tl.arange(0, BLOCK_R)
    col_mask = cols < D2
    acc = tl.full((BLOCK_R, BLOCK_C), 0.0, tl.float32)
    for start in range(0, D1, BLOCK_R):
        r = start + rows
        mask = (r[:, None] < D1) & col_mask[None, :]
        x = tl.load(x_ptr + b * stride_b + r[:, None] * stride_d1 + cols[None, :] * stride_d2,
                    mask=mask, other=0.0)
        acc += x
    acc = tl.sum(acc, axis=0)
    tl.store(out_ptr + b * D2 + cols, acc / D1, mask=col_mask)


class ModelNew(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        if dim != 1:
            raise ValueError("this kernel reduces dimension 1 of a 3-D input")
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, D1, D2 = x.shape
        out = torch.empty((B, D2), device=x.device, dtype=torch.float32)
        grid = (B, triton.cdiv(D2, 64))
        mean_dim1_kernel[grid](x, out, D1, D2, x.stride(0), x.stride(1), x.stride(2), BLOCK_R=32, BLOCK_C=64)
        return out
