import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def jacobi_kernel(u_ptr, out_ptr, H, W, BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """One BLOCK_H x BLOCK_W tile: interior cells get the mean of their 4 neighbours, edge cells are copied."""
    rows = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
    cols = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    inside = (rows < H) & (cols < W)
    interior = (rows > 0) & (rows < H - 1) & (cols > 0) & (cols < W - 1)
    offs = rows.to(tl.int64) * W + cols
    centre = tl.load(u_ptr + offs, mask=inside, other=0.0)
    north = tl.load(u_ptr + offs - W, mask=interior, other=0.0)
    south = tl.load(u_ptr + offs + W, mask=interior, other=0.0)
    west = tl.load(u_ptr + offs - 1, mask=interior, other=0.0)
    east = tl.load(u_ptr + offs + 1, mask=interior, other=0.0)
    mean = 0.25 * (((north + south) + west) + east)  # the reference's summation order
    tl.store(out_ptr + offs, tl.where(interior, mean, centre), mask=inside)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        u = u.contiguous()
        H, W = u.shape
        out = torch.empty_like(u)
        grid = (triton.cdiv(H, 16), triton.cdiv(W, 128))
        jacobi_kernel[grid](u, out, H, W, BLOCK_H=16, BLOCK_W=128)
        return out
