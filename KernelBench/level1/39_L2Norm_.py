import torch
import torch.nn as nn


class Model(nn.Module):
    """Divides each row of a (batch, dim) tensor by its L2 norm."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x / torch.norm(x, p=2, dim=1, keepdim=True)


batch_size = 32768
dim = 65535  # batch_size * dim stays just under 2**31 elements

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 16, "dim": 1000}


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
