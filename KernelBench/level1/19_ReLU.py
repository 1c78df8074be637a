import torch
import torch.nn as nn


class Model(nn.Module):
    """Applies ReLU elementwise. The inputs are uniform in [0, 1), as KernelBench draws them."""

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x)


batch_size = 4096
dim = 393216  # 1.6e9 elements (6 GiB) per tensor

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 16, "dim": 1000}


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
