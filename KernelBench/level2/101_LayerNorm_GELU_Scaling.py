import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the hidden dimension, exact GELU, multiply by a constant.

    Not a KernelBench problem (KernelBench's level 2 stops at 100); a transformer-style fusion.
    """

    def __init__(self, hidden: int, scaling_factor: float):
        super().__init__()
        self.norm = nn.LayerNorm(hidden)
        self.scaling_factor = scaling_factor

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.norm(x)
        x = torch.nn.functional.gelu(x)
        return x * self.scaling_factor


batch_size = 32
seq_len = 4096
hidden = 2048
scaling_factor = 1.5

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 2, "seq_len": 8, "hidden": 200}


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden)
    return [x]


def get_init_inputs():
    return [hidden, scaling_factor]
