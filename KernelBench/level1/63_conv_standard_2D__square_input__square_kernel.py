import torch
import torch.nn as nn


class Model(nn.Module):
    """Standard 2D convolution (no bias) of a square input with a square kernel."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int):
        super().__init__()
        self.conv2d = nn.Conv2d(in_channels, out_channels, kernel_size, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.conv2d(x)


batch_size = 16
in_channels = 32
out_channels = 64
kernel_size = 3
size = 512

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 2, "in_channels": 4, "out_channels": 8, "size": 12}


def get_inputs():
    x = torch.randn(batch_size, in_channels, size, size)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, kernel_size]
