import torch
import torch.nn as nn
import triton
import triton.language as tl

BINS = 256


@triton.jit
def partial_histogram_kernel(data_ptr, partial_ptr, N, SPAN: tl.constexpr, BLOCK: tl.constexpr, BINS: tl.constexpr):
    """Counts of the values in one SPAN-long slice of data (clamped to [0, BINS - 1]) into row pid of partial."""
    pid = tl.program_id(0)
    start = pid.to(tl.int64) * SPAN
    offs = tl.arange(0, BLOCK)
    counts = tl.zeros((BINS,), tl.int32)
    for chunk in range(0, SPAN, BLOCK):
        idx = start + chunk + offs
        mask = idx < N
        values = tl.load(data_ptr + idx, mask=mask, other=0)
        values = tl.minimum(tl.maximum(values, 0), BINS - 1).to(tl.int32)
        counts += tl.histogram(values, BINS, mask=mask)
    tl.store(partial_ptr + pid * BINS + tl.arange(0, BINS), counts)


@triton.jit
def sum_partials_kernel(partial_ptr, out_ptr, ROWS, BINS: tl.constexpr):
    """out[b] = sum over rows of partial[:, b], as float32 (exact: counts stay far below 2^24)."""
    bins = tl.arange(0, BINS)
    total = tl.zeros((BINS,), tl.int64)
    for row in range(0, ROWS):
        total += tl.load(partial_ptr + row * BINS + bins).to(tl.int64)
    tl.store(out_ptr + bins, total.to(tl.float32))


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, data: torch.Tensor) -> torch.Tensor:
        data = data.contiguous().view(-1)
        n = data.numel()
        span = 32768  # ~128 programs for 4M pixels
        programs = max(1, triton.cdiv(n, span))
        partial = torch.empty((programs, BINS), device=data.device, dtype=torch.int32)
        partial_histogram_kernel[(programs,)](data, partial, n, SPAN=span, BLOCK=4096, BINS=BINS)
        out = torch.empty(BINS, device=data.device, dtype=torch.float32)
        sum_partials_kernel[(1,)](partial, out, programs, BINS=BINS)
        return out
