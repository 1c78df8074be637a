# Threat: processes that outlive the verdict. A forward that forks, calls setsid() and forks again leaves a
# daemon in a session of its own (killing the child's process group misses it) whose parent is gone (it is no
# longer the child's descendant), plus plain children that sleep on. Each call makes more: left alone they pile up
# across candidates (root processes on a CPU machine), hold memory and could serve later candidates.
import os, time
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


def _linger(name):
    import ctypes
    ctypes.CDLL(None).prctl(15, name.encode(), 0, 0, 0)
    time.sleep(600)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        import posix
        if posix.fork() == 0:  # a daemon: fork, setsid, fork, exit
            posix.setsid()
            if posix.fork() == 0:
                _linger("kbrlleakd")
            posix._exit(0)
        for _ in range(3):  # and plain children that stay
            if posix.fork() == 0:
                _linger("kbrlleakc")
        y = torch.empty_like(x)
        n = x.numel()
        relu_kernel[(triton.cdiv(n, 1024),)](x, y, n, BLOCK=1024)
        return y
