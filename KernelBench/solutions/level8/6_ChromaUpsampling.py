import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _blend(src_ptr, dst_ptr, offs, inside, top, bottom, x0, x1, wy0, wy1, wx0, wx1):
    a = tl.load(src_ptr + top + x0, mask=inside, other=0.0)
    b = tl.load(src_ptr + top + x1, mask=inside, other=0.0)
    c = tl.load(src_ptr + bottom + x0, mask=inside, other=0.0)
    d = tl.load(src_ptr + bottom + x1, mask=inside, other=0.0)
    # Weighted as ATen's bilinear kernel weighs them: rows outside, columns inside.
    tl.store(dst_ptr + offs, wy0 * (wx0 * a + wx1 * b) + wy1 * (wx0 * c + wx1 * d), mask=inside)


@triton.jit
def chroma_upsample_kernel(y_ptr, u_ptr, v_ptr, y_out_ptr, u_out_ptr, v_out_ptr, H, W, h, w, scale_h, scale_w,
                           BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """One output tile: Y copied, U and V resized from (h, w) to (H, W) bilinearly with half-pixel
    centres (align_corners=False): source = (dest + 0.5) * scale - 0.5, clamped at 0."""
    rows = tl.program_id(0) * BLOCK_H + tl.arange(0, BLOCK_H)[:, None]
    cols = tl.program_id(1) * BLOCK_W + tl.arange(0, BLOCK_W)[None, :]
    inside = (rows < H) & (cols < W)
    offs = rows.to(tl.int64) * W + cols
    tl.store(y_out_ptr + offs, tl.load(y_ptr + offs, mask=inside, other=0.0), mask=inside)

    src_y = tl.maximum((rows.to(tl.float32) + 0.5) * scale_h - 0.5, 0.0)
    src_x = tl.maximum((cols.to(tl.float32) + 0.5) * scale_w - 0.5, 0.0)
    y0 = tl.minimum(src_y.to(tl.int32), h - 1)
    x0 = tl.minimum(src_x.to(tl.int32), w - 1)
    y1 = tl.minimum(y0 + 1, h - 1)
    x1 = tl.minimum(x0 + 1, w - 1)
    wy1 = src_y - y0.to(tl.float32)
    wx1 = src_x - x0.to(tl.float32)
    wy0 = 1.0 - wy1
    wx0 = 1.0 - wx1
    top = y0.to(tl.int64) * w
    bottom = y1.to(tl.int64) * w
    _blend(u_ptr, u_out_ptr, offs, inside, top, bottom, x0, x1, wy0, wy1, wx0, wx1)
    _blend(v_ptr, v_out_ptr, offs, inside, top, bottom, x0, x1, wy0, wy1, wx0, wx1)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, y_full: torch.Tensor, u_half: torch.Tensor, v_half: torch.Tensor) -> tuple:
        y_full, u_half, v_half = y_full.contiguous(), u_half.contiguous(), v_half.contiguous()
        H, W = y_full.shape
        h, w = u_half.shape
        y_out, u_out, v_out = torch.empty_like(y_full), torch.empty((H, W), device=y_full.device), torch.empty((H, W), device=y_full.device)
        grid = (triton.cdiv(H, 16), triton.cdiv(W, 64))
        chroma_upsample_kernel[grid](y_full, u_half, v_half, y_out, u_out, v_out, H, W, h, w, h / H, w / W,
                                     BLOCK_H=16, BLOCK_W=64)
        return y_out, u_out, v_out
