"""A legitimate Triton candidate full of things a regex checker mistakes for hacks.

The words pass, try/except, torch.matmul and nn.Conv2d in this docstring mean nothing: pass.
"""
import math

import torch
from torch import nn
from torch.nn import Conv2d

try:  # optional import at module level: fine
    import numpy as np
except ImportError:  # pragma: no cover
    np = None

import triton
import triton.language as tl


def cdiv(a: int, b: int) -> int:
    return (a + b - 1) // b


def pick_block(n: int) -> int:
    block = triton.next_power_of_2(min(n, 1024))
    return max(block * 2 // 2, 16) if n > 0 else 16


@triton.autotune(configs=[triton.Config({"BLOCK": 256}), triton.Config({"BLOCK": 512})], key=["n"])
@triton.jit
def scale_bias_kernel(x_ptr, w_ptr, b_ptr, out_ptr, n, C, HW, BLOCK: tl.constexpr):
    pid = tl.program_id(0)
    offs = pid * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    c = (offs // HW) % C
    x = tl.load(x_ptr + offs, mask=mask)
    w = tl.load(w_ptr + c, mask=mask)
    b = tl.load(b_ptr + c, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x * w + b, 0.0), mask=mask)


@triton.jit
def _square(x):
    return x * x


@triton.jit
def square_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, _square(tl.load(x_ptr + offs, mask=mask)), mask=mask)


class SquareFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        out = torch.empty_like(x)
        n = x.numel()
        block = pick_block(n)
        square_kernel[(cdiv(n, block),)](x, out, n, BLOCK=block)
        return out

    @staticmethod
    def backward(ctx, grad):
        return grad * 2  # never in the forward path


class Square(nn.Module):
    def forward(self, x):
        return SquareFn.apply(x)


class ModelNew(nn.Module):
    def __init__(self, channels: int, kernel_size: int = 3):
        super().__init__()
        # Parameter holders: built like the reference so the seeded weights match, never called.
        self.conv = Conv2d(channels, channels, kernel_size)
        self.norm = nn.BatchNorm2d(channels)
        self.scale = nn.Parameter(torch.ones(channels))
        self.square = Square()
        self.blocks_seen = set()
        self.eps = 1e-5 * math.sqrt(channels)

    def _launch(self, x: torch.Tensor) -> torch.Tensor:
        x = x.contiguous()
        out = torch.empty_like(x)
        n = x.numel()
        N, C, H, W = x.shape
        weight = self.conv.weight.view(C, -1)[:, 0].contiguous()
        bias = self.conv.bias.detach().to(x.device)
        grid = lambda meta: (triton.cdiv(n, meta["BLOCK"]),)
        scale_bias_kernel[grid](x, weight, bias, out, n, C, H * W)
        self.blocks_seen.add(n)
        return out

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        assert x.dim() == 4 and x.shape[1] == self.scale.shape[0]
        seen = set()
        seen.add(x.shape[0])
        y = self._launch(x)
        y = y.view(y.size(0), -1).reshape(x.shape)
        return self.square(y)


def get_inputs():
    return [torch.randn(2, 4, 8, 8)]


def get_init_inputs():
    return [4]


if __name__ == "__main__":
    from reference import Model  # local testing only

    model = ModelNew(4)
    x = torch.randn(2, 4, 8, 8)
    print(torch.allclose(model(x), Model(4)(x)))
