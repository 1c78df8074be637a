import torch
import torch.nn as nn


class Model(nn.Module):
    """Pointwise (1x1) 2D convolution: a channel mix at every pixel; bias off unless asked for."""

    def __init__(self, in_channels: int, out_channels: int, bias: bool = False):
        super().__init__()
        self.conv1d = nn.Conv2d(in_channels, out_channels, kernel_size=1, stride=1, padding=0, bias=bias)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv1d(x)


batch_size = 16
in_channels = 64
out_channels = 128
width = 1024
height = 1024

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 2, "in_channels": 6, "out_channels": 10, "width": 7, "height": 9}


def get_inputs():
    x = torch.rand(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels]
