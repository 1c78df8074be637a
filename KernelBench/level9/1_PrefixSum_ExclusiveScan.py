import torch
import torch.nn as nn


class Model(nn.Module):
    """Exclusive prefix sum of a 1D array: out[0] = 0, out[i] = x[0] + ... + x[i-1]."""

    def __init__(self):
        super().__init__()

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(input, dim=0) - input


array_size = 16 * 1024 * 1024

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored elsewhere.
KBRL_SMALL_SIZES = {"array_size": 5000}


def get_inputs():
    return [torch.rand(array_size)]


def get_init_inputs():
    return []
