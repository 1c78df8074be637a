import torch
import torch.nn as nn


class Model(nn.Module):
    """Sum over one dimension (given at construction), keeping it as size 1."""

    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sum(x, dim=self.dim, keepdim=True)


batch_size = 128
dim1 = 4096
dim2 = 4095
reduce_dim = 1

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 4, "dim1": 100, "dim2": 39}


def get_inputs():
    x = torch.rand(batch_size, dim1, dim2)
    return [x]


def get_init_inputs():
    return [reduce_dim]
