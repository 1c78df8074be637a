"""One numerics setting for every process that runs a model: the worker (reference, baseline) and the
candidate's child.

On an 80 GB H100 the reference ran with TF32 off while the candidate's process kept cuDNN's TF32
default: identical conv code then mismatched at fp32's 1e-4 (errors up to 1.2) and read 2-7x
"faster" than the exact-fp32 baseline. So both sides call `apply()` before any model runs, the
settings travel in every result's `versions`, and the child checks after the candidate ran that
nobody changed them (a candidate that turns TF32 back on buys speed with precision).

Worker side only: torch and the standard library.
"""

from __future__ import annotations

import torch

# Not set, on purpose (measured on an H100, torch 2.11):
# - deterministic algorithms (`torch.use_deterministic_algorithms`, `cudnn.deterministic`): cuDNN then
#   picks slow kernels; KernelBench's L2/77 (ConvTranspose3d) took 472 ms against the 5.42 ms of
#   KernelBench's own baseline, so every speedup would be measured against a straw man. Identical code
#   reads 1.00 without them, since both sides make the same (heuristic, benchmark-off) algorithm choice.
# - `expandable_segments` in PYTORCH_CUDA_ALLOC_CONF: CUDA IPC of such segments needs pidfd_getfd,
#   which the confined child refuses, and the pool fell back to moving tensors through files.


def apply() -> None:
    """Exact fp32 (no TF32 in cuBLAS or cuDNN) and no cuDNN autotuning (`benchmark` would let the two
    processes time different algorithms)."""
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    torch.set_float32_matmul_precision("highest")
    torch.backends.cudnn.benchmark = False


def snapshot() -> dict[str, str]:
    """The settings in force, as recorded in `EvalResult.versions['numerics']` and compared after a run."""
    return {
        "cuda.matmul.allow_tf32": str(torch.backends.cuda.matmul.allow_tf32),
        "cudnn.allow_tf32": str(torch.backends.cudnn.allow_tf32),
        "float32_matmul_precision": torch.get_float32_matmul_precision(),
        "cudnn.benchmark": str(torch.backends.cudnn.benchmark),
        "cudnn.deterministic": str(torch.backends.cudnn.deterministic),
        "deterministic_algorithms": str(torch.are_deterministic_algorithms_enabled()),
    }


def describe(settings: dict[str, str] | None = None) -> str:
    settings = settings if settings is not None else snapshot()
    return ", ".join(f"{key}={value}" for key, value in sorted(settings.items()))


def changed(before: dict[str, str]) -> list[str]:
    """Names of the settings that differ from `before` (a candidate changed them)."""
    now = snapshot()
    return [key for key in sorted(before) if now.get(key) != before[key]]
