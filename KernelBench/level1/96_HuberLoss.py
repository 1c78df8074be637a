import torch
import torch.nn as nn


class Model(nn.Module):
    """Smooth L1 (Huber, beta = 1) loss between predictions and targets, averaged to one scalar."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.smooth_l1_loss(predictions, targets)


batch_size = 32768
input_shape = (32768,)  # the shape of one sample
dim = 1  # not used by the model; KernelBench's file defines it too

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 16, "input_shape": (500,)}


def get_inputs():
    # Predictions are uniform on [0, scale) for one random scale, targets uniform on [0, 1).
    scale = torch.rand(())
    predictions = torch.rand(batch_size, *input_shape) * scale
    targets = torch.rand(batch_size, *input_shape)
    return [predictions, targets]


def get_init_inputs():
    return []
