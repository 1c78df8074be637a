import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear without bias, add a learned bias vector, ReLU."""

    def __init__(self, in_features: int, out_features: int, bias_shape: tuple):
        super().__init__()
        self.gemm = nn.Linear(in_features, out_features, bias=False)
        self.bias = nn.Parameter(torch.randn(bias_shape))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.gemm(x)
        x = x + self.bias
        return torch.relu(x)


batch_size = 8192
in_features = 4096
out_features = 4096

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 12, "in_features": 40, "out_features": 24}


def get_inputs():
    x = torch.randn(batch_size, in_features)
    return [x]


def get_init_inputs():
    return [in_features, out_features, (out_features,)]
