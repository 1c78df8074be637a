import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean squared error between predictions and targets (a scalar)."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean((predictions - targets) ** 2)


batch_size = 16384
dim = 16384

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 16, "dim": 500}


def get_inputs():
    predictions = torch.randn(batch_size, dim)
    targets = torch.randn(batch_size, dim)
    return [predictions, targets]


def get_init_inputs():
    return []
