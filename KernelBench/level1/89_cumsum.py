import torch
import torch.nn as nn


class Model(nn.Module):
    """Inclusive prefix sum (cumsum) along one dimension, given at construction."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.cumsum(x, dim=self.dim)


batch_size = 32768
input_shape = (32768,)  # the shape of one sample
dim = 1

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 8, "input_shape": (300,)}


def get_inputs():
    x = torch.rand(batch_size, *input_shape)
    return [x]


def get_init_inputs():
    return [dim]
