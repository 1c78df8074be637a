import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean hinge loss max(0, 1 - y * f) with labels y in {-1, +1} given per row."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


batch_size = 16384
dim = 32768

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 16, "dim": 500}


def get_inputs():
    predictions = torch.randn(batch_size, dim)
    # Labels are drawn as integers and mapped to -1.0 / +1.0 on purpose: the loss needs float labels.
    targets = torch.randint(0, 2, (batch_size, 1)).float() * 2 - 1
    return [predictions, targets]


def get_init_inputs():
    return []
