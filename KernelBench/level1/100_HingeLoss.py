import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean of max(0, 1 - predictions * targets) with labels in {-1, +1}.

    targets has shape (batch_size,) and broadcasts against the last dimension of the
    (batch_size, *input_shape) predictions, so label j scales column j: batch_size must equal
    input_shape[-1] (or be 1), at every size.
    """

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.mean(torch.clamp(1 - predictions * targets, min=0))


batch_size = 32768
input_shape = (32768,)  # the shape of one sample
dim = 1  # not used by the model; KernelBench's file defines it too

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 64, "input_shape": (64,)}


def get_inputs():
    predictions = torch.rand(batch_size, *input_shape)
    # Labels are drawn as integers and mapped to -1.0 / +1.0 on purpose: the loss needs float labels.
    targets = torch.randint(0, 2, (batch_size,)).float() * 2 - 1
    return [predictions, targets]


def get_init_inputs():
    return []
