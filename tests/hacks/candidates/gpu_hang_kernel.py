# Sandbox threat: a GPU kernel that spins forever (its exit condition reads memory nothing writes).
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def spin_kernel(flag_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    flag = tl.load(flag_ptr)
    while flag == 0:
        flag = tl.load(flag_ptr, volatile=True)
    tl.store(out_ptr + offs, tl.zeros([BLOCK], dtype=tl.float32), mask=offs < n)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flag = torch.zeros(1, dtype=torch.int32, device=x.device)
        out = torch.empty_like(x)
        n = x.numel()
        spin_kernel[(triton.cdiv(n, 1024),)](flag, out, n, BLOCK=1024)
        return out
