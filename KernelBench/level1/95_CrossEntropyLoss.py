import torch
import torch.nn as nn


class Model(nn.Module):
    """Mean cross-entropy between logits (batch, classes) and integer class targets (batch,)."""

    def __init__(self):
        super().__init__()

    def forward(self, predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.cross_entropy(predictions, targets)


batch_size = 65536
num_classes = 4096

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 16, "num_classes": 100}


def get_inputs():
    predictions = torch.randn(batch_size, num_classes)
    targets = torch.randint(0, num_classes, (batch_size,))
    return [predictions, targets]


def get_init_inputs():
    return []
