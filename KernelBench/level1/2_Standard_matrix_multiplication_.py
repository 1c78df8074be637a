import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B with A of shape (M, K) and B of shape (K, N), entries uniform in [0, 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 2048
K = 8192
N = 4096

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"M": 48, "K": 80, "N": 40}


def get_inputs():
    A = torch.rand(M, K)
    B = torch.rand(K, N)
    return [A, B]


def get_init_inputs():
    return []
