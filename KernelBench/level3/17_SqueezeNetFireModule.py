import torch
import torch.nn as nn


class Model(nn.Module):
    """SqueezeNet's Fire module: 1x1 squeeze, then 1x1 and 3x3 expands concatenated on channels."""

    def __init__(self, in_channels: int, squeeze_channels: int, expand1x1_channels: int, expand3x3_channels: int):
        super().__init__()
        self.squeeze = nn.Conv2d(in_channels, squeeze_channels, kernel_size=1)
        self.squeeze_activation = nn.ReLU(inplace=True)
        self.expand1x1 = nn.Conv2d(squeeze_channels, expand1x1_channels, kernel_size=1)
        self.expand1x1_activation = nn.ReLU(inplace=True)
        self.expand3x3 = nn.Conv2d(squeeze_channels, expand3x3_channels, kernel_size=3, padding=1)
        self.expand3x3_activation = nn.ReLU(inplace=True)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.squeeze_activation(self.squeeze(x))
        return torch.cat(
            [self.expand1x1_activation(self.expand1x1(x)), self.expand3x3_activation(self.expand3x3(x))], 1
        )


batch_size = 32
in_channels = 128
squeeze_channels = 32
expand1x1_channels = 128
expand3x3_channels = 128
height = 128
width = 128

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {
    "batch_size": 2, "in_channels": 8, "squeeze_channels": 4, "expand1x1_channels": 6,
    "expand3x3_channels": 6, "height": 9, "width": 10,
}


def get_inputs():
    x = torch.randn(batch_size, in_channels, height, width)
    return [x]


def get_init_inputs():
    return [in_channels, squeeze_channels, expand1x1_channels, expand3x3_channels]
