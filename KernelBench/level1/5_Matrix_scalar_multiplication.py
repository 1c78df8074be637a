import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A * s for a matrix A of shape (M, N) and a Python float s."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        return A * s


M = 65536
N = 16384

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"M": 24, "N": 100}


def get_inputs():
    A = torch.rand(M, N)
    s = 3.14
    return [A, s]


def get_init_inputs():
    return []
