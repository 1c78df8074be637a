import torch
import torch.nn as nn


class Model(nn.Module):
    """Linear (input_size -> output_size), divide by a constant, exact GELU."""

    def __init__(self, input_size: int, output_size: int, divisor: float):
        super().__init__()
        self.linear = nn.Linear(input_size, output_size)
        self.divisor = divisor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.linear(x)
        x = x / self.divisor
        return torch.nn.functional.gelu(x)


batch_size = 1024
input_size = 8192
output_size = 8192
divisor = 10.0

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 12, "input_size": 40, "output_size": 24}


def get_inputs():
    x = torch.rand(batch_size, input_size)
    return [x]


def get_init_inputs():
    return [input_size, output_size, divisor]
