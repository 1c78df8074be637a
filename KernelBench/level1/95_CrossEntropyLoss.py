import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean cross-entropy of (batch, num_classes) logits against integer class labels."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(predictions, targets)


batch_size = 32768
num_classes = 4096
input_shape = (num_classes,)  # the shape of one sample's logits
dim = 1  # not used by the model; KernelBench's file defines it too

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 16, "num_classes": 100}


def get_inputs():
    predictions = torch.rand(batch_size, *input_shape)
    targets = torch.randint(0, num_classes, (batch_size,))
    return [predictions, targets]


def get_init_inputs():
    return []
