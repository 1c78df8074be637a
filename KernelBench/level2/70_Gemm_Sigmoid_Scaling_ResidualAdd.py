import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear, then sigmoid(x) * scaling_factor added to the Linear output."""

    def __init__(self, in_features: int, out_features: int, scaling_factor: float):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        original_x = x
        x = torch.sigmoid(x)
        x = x * self.scaling_factor
        return x + original_x


batch_size = 8192
in_features = 4096
out_features = 4096
scaling_factor = 2.0

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 12, "in_features": 40, "out_features": 24}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, scaling_factor]
