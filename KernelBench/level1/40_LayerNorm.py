import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the trailing dimensions given by normalized_shape, with affine weights.

    The inputs are (batch, features, dim1, dim2) and normalized_shape is (features, dim1, dim2):
    each sample is normalised as a whole.
    """

    def __init__(self, normalized_shape: tuple):
        super().__init__()
        self.ln = nn.LayerNorm(normalized_shape=normalized_shape)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 16
features = 64
dim1 = 256
dim2 = 256

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 2, "features": 4, "dim1": 8, "dim2": 10}


def get_inputs():
    x = torch.rand(batch_size, features, dim1, dim2)
    return [x]


def get_init_inputs():
    return [(features, dim1, dim2)]
