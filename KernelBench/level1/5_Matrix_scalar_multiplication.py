import torch
import torch.nn as nn


class Model(nn.Module):
    """C = A * s for a matrix A and a Python float s."""

    def __init__(self):
        super().__init__()

    def forward(self, A: torch.Tensor, s: float) -> torch.Tensor:
        return A * s


M = 16384
N = 32768

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"M": 24, "N": 100}


def get_inputs():
    A = torch.randn(M, N)
    s = 3.14
    return [A, s]


def get_init_inputs():
    return []
