# Sandbox threat: 100 MB on stdout and 10 MB on stderr (a log flood that can fill a pipe, a database
# row or the orchestrator's memory), then a correct answer.
import sys

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


_LINE = "flood " * 170 + "\n"  # ~1 KiB


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self._flooded = False

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if not self._flooded:
            self._flooded = True
            block = _LINE * 1024  # ~1 MiB
            for _ in range(100):
                sys.stdout.write(block)
            for _ in range(10):
                sys.stderr.write(block)
            sys.stdout.flush()
            sys.stderr.flush()
        out = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
