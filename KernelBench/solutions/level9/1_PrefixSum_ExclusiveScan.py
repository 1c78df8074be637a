import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def block_sums_kernel(x_ptr, sums_ptr, N, BLOCK: tl.constexpr):
    """sums[pid] = total of the pid-th BLOCK-long slice of x."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    tl.store(sums_ptr + pid, tl.sum(tl.load(x_ptr + offs, mask=offs < N, other=0.0), axis=0))


@triton.jit
def exclusive_scan_sums_kernel(sums_ptr, offsets_ptr, COUNT, BLOCK: tl.constexpr):
    """offsets[i] = sums[0] + ... + sums[i - 1], by one program, BLOCK sums at a time."""
    idx = tl.arange(0, BLOCK)
    carry = tl.sum(tl.zeros((BLOCK,), tl.float32), axis=0)
    for start in range(0, COUNT, BLOCK):
        mask = start + idx < COUNT
        s = tl.load(sums_ptr + start + idx, mask=mask, other=0.0)
        tl.store(offsets_ptr + start + idx, tl.cumsum(s, 0) - s + carry, mask=mask)
        carry += tl.sum(s, axis=0)


@triton.jit
def scan_blocks_kernel(x_ptr, offsets_ptr, out_ptr, N, BLOCK: tl.constexpr):
    """Exclusive scan of one slice, shifted by the total of every slice before it."""
    pid = tl.program_id(0)
    offs = pid.to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < N
    x = tl.load(x_ptr + offs, mask=mask, other=0.0)
    inclusive = tl.cumsum(x, 0)
    tl.store(out_ptr + offs, inclusive - x + tl.load(offsets_ptr + pid), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        x = input.contiguous()
        n = x.shape[0]
        out = torch.empty_like(x)
        if n == 0:
            return out
        block = 4096
        blocks = triton.cdiv(n, block)
        sums = torch.empty(blocks, device=x.device, dtype=torch.float32)
        offsets = torch.empty_like(sums)
        block_sums_kernel[(blocks,)](x, sums, n, BLOCK=block)
        exclusive_scan_sums_kernel[(1,)](sums, offsets, blocks, BLOCK=1024)
        scan_blocks_kernel[(blocks,)](x, offsets, out, n, BLOCK=block)
        return out
