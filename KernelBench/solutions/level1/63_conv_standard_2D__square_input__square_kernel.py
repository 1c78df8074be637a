import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv2d_kernel(
    x_ptr, w_ptr, bias_ptr, extra_ptr, out_ptr, C_in, H, W, C_out, OH, OW, stride, padding, p1,
    HAS_BIAS: tl.constexpr, KS: tl.constexpr, BLOCK_CO: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Direct convolution: a (BLOCK_CO output channels) x (BLOCK_P output pixels) tile per program,
    accumulated as outer products of weight columns and input pixels."""
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    co = tl.program_id(1) * BLOCK_CO + tl.arange(0, BLOCK_CO)
    n = tl.program_id(2).to(tl.int64)
    p_mask = p < OH * OW
    co_mask = co < C_out
    oh = p // OW
    ow = p % OW
    acc = tl.zeros((BLOCK_CO, BLOCK_P), dtype=tl.float32)
    for ci in range(0, C_in):
        x_base = x_ptr + (n * C_in + ci) * H * W
        w_base = w_ptr + (co * C_in + ci) * KS * KS
        for kh in tl.static_range(KS):
            for kw in tl.static_range(KS):
                ih = oh * stride - padding + kh
                iw = ow * stride - padding + kw
                inside = p_mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                xv = tl.load(x_base + ih * W + iw, mask=inside, other=0.0)
                wv = tl.load(w_base + kh * KS + kw, mask=co_mask, other=0.0)
                acc += wv[:, None] * xv[None, :]
    y = acc
    if HAS_BIAS:
        y += tl.load(bias_ptr + co, mask=co_mask, other=0.0)[:, None]
    out_offs = (n * C_out + co[:, None]) * (OH * OW) + p[None, :]
    tl.store(out_ptr + out_offs, y, mask=co_mask[:, None] & p_mask[None, :])


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        # Parameter holders, created in Model's order so the seeded init gives the same values.
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        w = self.conv2d.weight.contiguous()
        N, C_in, H, W = x.shape
        C_out, _, KS, _ = w.shape
        stride, padding = self.conv2d.stride[0], self.conv2d.padding[0]
        OH = (H + 2 * padding - KS) // stride + 1
        OW = (W + 2 * padding - KS) // stride + 1
        out = torch.empty((N, C_out, OH, OW), device=x.device, dtype=torch.float32)
        block_co, block_p = 16, 128
        grid = (triton.cdiv(OH * OW, block_p), triton.cdiv(C_out, block_co), N)
        conv2d_kernel[grid](
            x, w, w, w, out, C_in, H, W, C_out, OH, OW, stride, padding, 0.0,
            HAS_BIAS=False, KS=KS, BLOCK_CO=block_co, BLOCK_P=block_p,
        )
        return out
