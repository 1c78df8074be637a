import torch
import torch.nn as nn


class Model(nn.Module):
    """Softmax over the last dimension of a (batch, dim) tensor.

    dim is kept at a few thousand so typical outputs (~1/dim) stay well above the 1e-4
    tolerance; a much wider row would let an all-zeros output pass.
    """

    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x, dim=1)


batch_size = 65536
dim = 4096

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 16, "dim": 1000}


def get_inputs():
    x = torch.randn(batch_size, dim)
    return [x]


def get_init_inputs():
    return []
