"""One pass over a CUDA output and its reference: the figures `checks.compare_outputs` needs.

The torch path in `checks` makes about twenty passes over each chunk (masks, a difference, boolean
indexing, `isclose`'s temporaries) and syncs several times a chunk; on KernelBench's 6 GiB level-1
outputs that is tens of milliseconds a seed, spent while the evaluator holds the GPU. This kernel reads
both tensors once and leaves one partial result per block; torch reduces those few.

Semantics are `torch.isclose(got, ref, rtol, atol, equal_nan=True)` computed in float32 (as the torch
path computes fp16/bf16/fp32 outputs), and the same max-abs-error and scale over the reference's finite
elements. Used only for fp32/fp16/bf16 CUDA tensors; everything else takes the torch path.
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass

import torch

FUSED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)
BLOCK = 4096

_kernel = None
_build_lock = threading.Lock()  # the worker's background warm-up and a comparison may both ask for it


@dataclass
class FusedFigures:
    bad: int  # elements outside tolerance
    max_abs_err: float  # over the reference's finite elements
    scale: float  # the reference's largest finite magnitude
    nonfinite: int  # elements where the candidate is NaN/Inf and the reference finite
    nan: int  # of those, NaN


def usable(ref: torch.Tensor, got: torch.Tensor) -> bool:
    return (ref.is_cuda and got.is_cuda and ref.device == got.device and ref.dtype == got.dtype
            and ref.dtype in FUSED_DTYPES and ref.numel() == got.numel())


def _build():
    import triton
    import triton.language as tl

    # n stays specialised: knowing it divisible by 16 lets the loads vectorise (6.1 ms against 4.9 ms on a 6 GiB
    # output without it, H100), at the cost of a second compile per dtype for lengths that are not. Each partial
    # result has its own allocation so the pointers' alignment never adds a variant.
    @triton.jit
    def compare_blocks(ref_ptr, got_ptr, n, atol, rtol, bad_ptr, err_ptr, scale_ptr, nonfinite_ptr, nan_ptr,
                       BLOCK_SIZE: tl.constexpr):
        block = tl.program_id(0)
        offs = block.to(tl.int64) * BLOCK_SIZE + tl.arange(0, BLOCK_SIZE)
        inside = offs < n
        r = tl.load(ref_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        g = tl.load(got_ptr + offs, mask=inside, other=0.0).to(tl.float32)
        r_abs = tl.abs(r)
        g_abs = tl.abs(g)
        r_finite = r_abs < float("inf")  # false for NaN and for +-Inf
        g_finite = g_abs < float("inf")
        r_nan = r != r
        g_nan = g != g
        diff = tl.abs(g - r)
        allowed = atol + rtol * r_abs
        # isclose(equal_nan=True): equal (equal infinities too), both NaN, or a finite difference within tolerance.
        close = (g == r) | (r_nan & g_nan) | ((diff < float("inf")) & (diff <= allowed))
        counted = inside & r_finite
        tl.store(bad_ptr + block, tl.sum((inside & ~close).to(tl.int32), axis=0))
        tl.store(err_ptr + block, tl.max(tl.where(counted & g_finite, diff, 0.0), axis=0))
        tl.store(scale_ptr + block, tl.max(tl.where(counted, r_abs, 0.0), axis=0))
        tl.store(nonfinite_ptr + block, tl.sum((counted & ~g_finite).to(tl.int32), axis=0))
        tl.store(nan_ptr + block, tl.sum((counted & g_nan).to(tl.int32), axis=0))

    return compare_blocks


def _built():
    global _kernel
    with _build_lock:
        if _kernel is None:
            _kernel = _build()
        return _kernel


def precompile(device: torch.device | str, lengths: tuple[int, ...] = (4096, 4097)) -> None:
    """Compile the fp32 variants these lengths need without launching anything: host work (Triton's front end,
    ptxas), which need not wait for a quiet device."""
    kernel = _built()
    for n in lengths:
        ref = torch.empty(n, device=device)
        blocks = (n + BLOCK - 1) // BLOCK
        bad, nonfinite, nan = (torch.empty(blocks, dtype=torch.int32, device=device) for _ in range(3))
        err, scale = (torch.empty(blocks, dtype=torch.float32, device=device) for _ in range(2))
        kernel.warmup(ref, ref, n, 1e-4, 1e-4, bad, err, scale, nonfinite, nan, BLOCK_SIZE=BLOCK, num_warps=8,
                      grid=(blocks,))


def compare(ref: torch.Tensor, got: torch.Tensor, atol: float, rtol: float) -> FusedFigures:
    """Both tensors on one CUDA device, same dtype (one of FUSED_DTYPES) and element count."""
    kernel = _built()
    ref_flat = ref.reshape(-1).contiguous()  # no copy unless a strided view needs one
    got_flat = got.reshape(-1).contiguous()
    n = ref_flat.numel()
    blocks = (n + BLOCK - 1) // BLOCK
    device = ref_flat.device
    bad, nonfinite, nan = (torch.empty(blocks, dtype=torch.int32, device=device) for _ in range(3))
    err, scale = (torch.empty(blocks, dtype=torch.float32, device=device) for _ in range(2))
    # On the CPU only under TRITON_INTERPRET=1 (the tests' way of checking these semantics without a GPU).
    with torch.cuda.device(device) if device.type == "cuda" else contextlib.nullcontext():
        kernel[(blocks,)](ref_flat, got_flat, n, float(atol), float(rtol), bad, err, scale, nonfinite, nan,
                           BLOCK_SIZE=BLOCK, num_warps=8)
    totals = torch.stack([bad.sum(dtype=torch.int64), nonfinite.sum(dtype=torch.int64),
                          nan.sum(dtype=torch.int64)]).tolist()
    peaks = torch.stack([err.amax(), scale.amax()]).tolist()
    return FusedFigures(bad=int(totals[0]), max_abs_err=float(peaks[0]), scale=float(peaks[1]),
                        nonfinite=int(totals[1]), nan=int(totals[2]))
