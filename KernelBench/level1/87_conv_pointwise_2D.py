import torch
import torch.nn as nn


class Model(nn.Module):
    """Pointwise (1x1) 2D convolution with bias: a channel mix at every pixel."""

    def __init__(self, in_channels: int, out_channels: int):
        super().__init__()
        self.conv1d = nn.Conv2d(in_channels, out_channels, kernel_size=1, bias=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv1d(x)


batch_size = 16
in_channels = 64
out_channels = 128
height = 512
width = 512

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 2, "in_channels": 6, "out_channels": 10, "height": 9, "width": 7}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
