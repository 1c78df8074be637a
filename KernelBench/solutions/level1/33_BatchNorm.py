import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def batch_norm_train_kernel(x_ptr, w_ptr, b_ptr, out_ptr, N, C, S, eps, BLOCK: tl.constexpr):
    """One program per channel of a contiguous (N, C, S) view: batch mean, biased variance, affine."""
    c = tl.program_id(0).to(tl.int64)
    offs = tl.arange(0, BLOCK)
    count = N * S
    acc = tl.zeros((BLOCK,), tl.float32)
    for n in range(0, N):
        base = (n * C + c) * S
        for start in range(0, S, BLOCK):
            acc += tl.load(x_ptr + base + start + offs, mask=start + offs < S, other=0.0)
    mean = tl.sum(acc, axis=0) / count
    acc = tl.zeros((BLOCK,), tl.float32)
    for n in range(0, N):
        base = (n * C + c) * S
        for start in range(0, S, BLOCK):
            mask = start + offs < S
            x = tl.load(x_ptr + base + start + offs, mask=mask, other=0.0)
            d = tl.where(mask, x - mean, 0.0)
            acc += d * d
    rstd = 1.0 / tl.sqrt(tl.sum(acc, axis=0) / count + eps)
    scale = tl.load(w_ptr + c) * rstd
    shift = tl.load(b_ptr + c) - mean * scale
    for n in range(0, N):
        base = (n * C + c) * S
        for start in range(0, S, BLOCK):
            mask = start + offs < S
            x = tl.load(x_ptr + base + start + offs, mask=mask, other=0.0)
            tl.store(out_ptr + base + start + offs, x * scale + shift, mask=mask)


class ModelNew(nn.Module):
    def __init__(self, num_features: int):
        super().__init__()
        self.bn = nn.BatchNorm2d(num_features=num_features)  # parameter holder (weight, bias, eps)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # Training-mode semantics, as the reference runs: normalise with this batch's statistics.
        x = x.contiguous()
        N, C = x.shape[0], x.shape[1]
        S = x.numel() // (N * C)
        out = torch.empty_like(x)
        batch_norm_train_kernel[(C,)](x, self.bn.weight, self.bn.bias, out, N, C, S, self.bn.eps, BLOCK=1024)
        return out
