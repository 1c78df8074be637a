import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over dimension 1 of a (batch, dim) tensor of values uniform in [0, 1).

    At the real width (393216) every output is about 1/dim ~ 3e-6, below the 1e-4 tolerance, so
    an all-zeros output passes there: that is KernelBench's problem as published. The small width
    used on the CPU (1000) keeps outputs near 1e-3, where zeros fail.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 4096
dim = 393216

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 16, "dim": 1000}


def get_inputs():
    x = torch.rand(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
