import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A @ B for a wide matrix A of shape (M, K) and a column vector B of shape (K, 1)."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, B: torch.Tensor) -> torch.Tensor:
        return torch.matmul(A, B)


M = 2048
K = 1048576  # A holds 2**31 elements (8 GiB): offsets into it need 64 bits

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"M": 40, "K": 300}


def get_inputs():
    A = torch.rand(M, K)
    B = torch.rand(K, 1)
    return [A, B]


def get_init_inputs():
    return []
