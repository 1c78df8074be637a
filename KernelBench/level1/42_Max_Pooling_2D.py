import torch
import torch.nn as nn


class Model(nn.Module):
    """2D max pooling with a square window, stride and zero padding."""

    def __init__(self, kernel_size: int, stride: int, padding: int):
        super().__init__()
        self.pool = nn.MaxPool2d(kernel_size=kernel_size, stride=stride, padding=padding)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(x)


batch_size = 32
channels = 64
height = 512
width = 512
kernel_size = 3
stride = 2
padding = 1

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 2, "channels": 3, "height": 17, "width": 15}


def get_inputs():
    x = torch.randn(batch_size, channels, height, width)
    return [x]


def get_init_inputs():
    return [kernel_size, stride, padding]
