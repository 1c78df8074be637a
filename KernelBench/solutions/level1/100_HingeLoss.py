import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def hinge_partial_kernel(p_ptr, t_ptr, partial_ptr, n, D, t_stride_row, t_stride_col, BLOCK: tl.constexpr):
    """Sum of max(0, 1 - p * t) over BLOCK elements of the (rows, D) predictions; the labels are
    read through the strides of their broadcast view (a zero stride repeats them)."""
    offs = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    p = tl.load(p_ptr + offs, mask=mask, other=0.0)
    t = tl.load(t_ptr + (offs // D) * t_stride_row + (offs % D) * t_stride_col, mask=mask, other=0.0)
    v = tl.maximum(1.0 - p * t, 0.0)
    v = tl.where(mask, v, 0.0)
    tl.store(partial_ptr + tl.program_id(0), tl.sum(v, axis=0))


@triton.jit
def mean_of_partials_kernel(partial_ptr, out_ptr, num_partials, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    acc = tl.zeros((BLOCK,), tl.float32)
    for start in range(0, num_partials, BLOCK):
        acc += tl.load(partial_ptr + start + offs, mask=start + offs < num_partials, other=0.0)
    tl.store(out_ptr, tl.sum(acc, axis=0) / n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        # The reference broadcasts targets against predictions: KernelBench's (batch,) labels line
        # up with the last dimension, so label j scales column j. Predictions are read as (rows, D)
        # and the labels through the strides of their broadcast view, which copies nothing.
        predictions = predictions.contiguous()
        D = predictions.shape[-1]
        rows = predictions.numel() // D
        labels = targets.expand(predictions.shape)
        if labels.dim() != 2:
            labels = labels.reshape(rows, D)
        n = predictions.numel()
        block = 4096
        num_partials = triton.cdiv(n, block)
        partials = torch.empty((num_partials,), device=predictions.device, dtype=torch.float32)
        hinge_partial_kernel[(num_partials,)](
            predictions, labels, partials, n, D, labels.stride(0), labels.stride(1), BLOCK=block,
        )
        out = torch.empty((), device=predictions.device, dtype=torch.float32)
        mean_of_partials_kernel[(1,)](partials, out, num_partials, n, BLOCK=1024)
        return out
