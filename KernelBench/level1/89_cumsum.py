import torch
import torch.nn as nn


class Model(nn.Module):
    """Inclusive prefix sum (cumsum) along one dimension."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


batch_size = 16384
length = 16384
scan_dim = 1

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 8, "length": 300}


def get_inputs():
    x = torch.randn(batch_size, length)
    return [x]


def get_init_inputs():
    return [scan_dim]
