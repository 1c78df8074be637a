import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, subtract a constant, multiply by a constant, ReLU.

    Not a KernelBench problem (KernelBench's level 2 stops at 100). KernelBench's L2/9 has this
    structure, but subtracts 2.0 from a Linear output of standard deviation ~0.3, so its ReLU
    output is all zeros and an empty kernel would pass; this variant subtracts 0.25.
    """

    def __init__(self, in_features: int, out_features: int, subtract_value: float, multiply_value: float):
        super().__init__()
        self.linear = nn.Linear(in_features, out_features)
        self.subtract_value = subtract_value
        self.multiply_value = multiply_value

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        x = x - self.subtract_value
        x = x * self.multiply_value
        return torch.relu(x)


batch_size = 8192
in_features = 4096
out_features = 4096
subtract_value = 0.25
multiply_value = 1.5

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 12, "in_features": 40, "out_features": 24}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, subtract_value, multiply_value]
