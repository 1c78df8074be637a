import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def conv2d_kernel(
    x_ptr, w_ptr, bias_ptr, out_ptr, C_in, H, W, C_out, OH, OW, cin_per_group, cout_per_group, co_blocks,
    stride_h, stride_w, pad_h, pad_w, dil_h, dil_w,
    HAS_BIAS: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, BLOCK_CO: tl.constexpr, BLOCK_P: tl.constexpr,
):
    """Direct convolution: a (BLOCK_CO output channels) x (BLOCK_P output pixels) tile per program,
    accumulated in fp32 as outer products of weight columns and input pixels. A tile never spans
    two groups, so all its output channels read the same input channels."""
    p = tl.program_id(0) * BLOCK_P + tl.arange(0, BLOCK_P)
    group = tl.program_id(1) // co_blocks
    co_local = (tl.program_id(1) % co_blocks) * BLOCK_CO + tl.arange(0, BLOCK_CO)
    n = tl.program_id(2).to(tl.int64)
    co = group * cout_per_group + co_local
    p_mask = p < OH * OW
    co_mask = co_local < cout_per_group
    oh = p // OW
    ow = p % OW
    acc = tl.zeros((BLOCK_CO, BLOCK_P), dtype=tl.float32)
    for cig in range(0, cin_per_group):
        x_base = x_ptr + (n * C_in + group * cin_per_group + cig) * H * W
        w_base = w_ptr + (co * cin_per_group + cig) * (KH * KW)
        for kh in tl.static_range(KH):
            for kw in tl.static_range(KW):
                ih = oh * stride_h - pad_h + kh * dil_h
                iw = ow * stride_w - pad_w + kw * dil_w
                inside = p_mask & (ih >= 0) & (ih < H) & (iw >= 0) & (iw < W)
                xv = tl.load(x_base + ih * W + iw, mask=inside, other=0.0)
                wv = tl.load(w_base + kh * KW + kw, mask=co_mask, other=0.0)
                acc += wv[:, None] * xv[None, :]
    if HAS_BIAS:
        acc += tl.load(bias_ptr + co, mask=co_mask, other=0.0)[:, None]
    out_offs = (n * C_out + co[:, None]) * (OH * OW) + p[None, :]
    tl.store(out_ptr + out_offs, acc, mask=co_mask[:, None] & p_mask[None, :])


class ModelNew(nn.Module):
    def __init__(
        self,
        in_channels: int,
        out_channels: int,
        kernel_size: int,
        stride: int = 1,
        padding: int = 0,
        dilation: int = 1,
        groups: int = 1,
        bias: bool = False,
    ):
        super().__init__()
        # Parameter holder, created as the reference creates it so the seeded init gives the same
        # weights; its stride, padding, dilation and groups are read in forward.
        self.conv2d = nn.Conv2d(
            in_channels, out_channels, (kernel_size, kernel_size),
            stride=stride, padding=padding, dilation=dilation, groups=groups, bias=bias,
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        conv = self.conv2d
        x = x.contiguous()
        w = conv.weight.contiguous()
        N, C_in, H, W = x.shape
        C_out, cin_per_group, KH, KW = w.shape
        cout_per_group = C_out // conv.groups
        (SH, SW), (PH, PW), (DH, DW) = conv.stride, conv.padding, conv.dilation
        OH = (H + 2 * PH - DH * (KH - 1) - 1) // SH + 1
        OW = (W + 2 * PW - DW * (KW - 1) - 1) // SW + 1
        out = torch.empty((N, C_out, OH, OW), device=x.device, dtype=x.dtype)
        block_co = min(16, triton.next_power_of_2(cout_per_group))
        block_p = 128
        co_blocks = triton.cdiv(cout_per_group, block_co)
        grid = (triton.cdiv(OH * OW, block_p), conv.groups * co_blocks, N)
        has_bias = conv.bias is not None
        conv2d_kernel[grid](
            x, w, conv.bias if has_bias else w, out, C_in, H, W, C_out, OH, OW, cin_per_group, cout_per_group,
            co_blocks, SH, SW, PH, PW, DH, DW,
            HAS_BIAS=has_bias, KH=KH, KW=KW, BLOCK_CO=block_co, BLOCK_P=block_p,
        )
        return out
