# Sandbox threat: a store 2**36 elements past the output. On a GPU this is an illegal address that
# poisons the CUDA context; in Triton's CPU interpreter it is a wild write (SIGSEGV).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def wild_store_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs + (1 << 36), tl.maximum(x, 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.empty_like(x)
        n = x.numel()
        wild_store_kernel[(triton.cdiv(n, 1024),)](x, out, n, BLOCK=1024)
        return out
