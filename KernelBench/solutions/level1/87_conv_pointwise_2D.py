import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def pointwise_conv_kernel(
    x_ptr, w_ptr, bias_ptr, out_ptr, C_in, C_out, S,
    HAS_BIAS: tl.constexpr, BLOCK_CO: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_CI: tl.constexpr,
):
    """A 1x1 convolution is, per image, out[n] = W (C_out x C_in) @ x[n] (C_in x S) (+ bias)."""
    pid_s = tl.program_id(0)
    pid_co = tl.program_id(1)
    n = tl.program_id(2).to(tl.int64)
    co = pid_co * BLOCK_CO + tl.arange(0, BLOCK_CO)
    s = pid_s * BLOCK_S + tl.arange(0, BLOCK_S)
    ci_offs = tl.arange(0, BLOCK_CI)
    x_base = x_ptr + n * C_in * S
    acc = tl.zeros((BLOCK_CO, BLOCK_S), dtype=tl.float32)
    for c0 in range(0, C_in, BLOCK_CI):
        ci = c0 + ci_offs
        w = tl.load(w_ptr + co[:, None] * C_in + ci[None, :],
                    mask=(co[:, None] < C_out) & (ci[None, :] < C_in), other=0.0)
        x = tl.load(x_base + ci[:, None] * S + s[None, :],
                    mask=(ci[:, None] < C_in) & (s[None, :] < S), other=0.0)
        acc = tl.dot(w, x, acc, input_precision="ieee")  # full fp32, not TF32
    if HAS_BIAS:
        acc += tl.load(bias_ptr + co, mask=co < C_out, other=0.0)[:, None]
    # int64 offsets: the real output has 2**31 elements.
    out_offs = (n * C_out + co[:, None]) * S + s[None, :]
    tl.store(out_ptr + out_offs, acc, mask=(co[:, None] < C_out) & (s[None, :] < S))


class ModelNew(nn.Module):
    def __init__(self, in_channels: int, out_channels: int, bias: bool = False):
        super().__init__()
        # Parameter holder, created as the reference creates it (the bias only if asked for).
        self.conv1d = nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=1, padding=0, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        N, C_in, H, W = x.shape
        w = self.conv1d.weight.reshape(self.conv1d.out_channels, C_in).contiguous()
        C_out = w.shape[0]
        S = H * W
        out = torch.empty((N, C_out, H, W), device=x.device, dtype=x.dtype)
        has_bias = self.conv1d.bias is not None
        grid = (triton.cdiv(S, 64), triton.cdiv(C_out, 64), N)
        pointwise_conv_kernel[grid](x, w, self.conv1d.bias if has_bias else w, out, C_in, C_out, S,
                                    HAS_BIAS=has_bias, BLOCK_CO=64, BLOCK_S=64, BLOCK_CI=32)
        return out
