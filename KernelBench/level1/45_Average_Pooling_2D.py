import torch
import torch.nn as nn


class Model(nn.Module):
    """2D average pooling with a square window; the stride defaults to the window (no overlap)."""

    def __init__(self, kernel_size: int, stride: int = None, padding: int = 0):
        super().__init__()
        self.avg_pool = nn.AvgPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.avg_pool(x)


batch_size = 16
channels = 64
height = 2048
width = 2048  # the input is 2**32 elements (16 GiB): offsets into it need 64 bits
kernel_size = 11

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 2, "channels": 3, "height": 47, "width": 36}


def get_inputs():
    x = torch.rand(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [kernel_size]
