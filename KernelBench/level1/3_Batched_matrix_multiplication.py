import torch
import torch.nn as nn


class Model(nn.Module):
    """Batched C[b] = A[b] @ B[b] for A of shape (batch, m, k) and B of shape (batch, k, n)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.bmm(A, B)


batch_size = 128
m = 512
k = 1024
n = 2048

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 3, "m": 20, "k": 36, "n": 24}


def get_inputs():
    A = torch.rand(batch_size, m, k)
    B = torch.rand(batch_size, k, n)
    return [A, B]


def get_init_inputs():
    return []
