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


batch_size = 128
num_input_features = 3
num_output_features = 64  # unused by the module; KernelBench's file declares it too
height = 256
width = 256
squeeze_channels = 6
expand1x1_channels = 64
expand3x3_channels = 64

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {
    "batch_size": 2, "squeeze_channels": 4, "expand1x1_channels": 6, "expand3x3_channels": 6,
    "height": 9, "width": 10,
}


def get_inputs():
    x = torch.rand(batch_size, num_input_features, height, width)
    return [x]


def get_init_inputs():
    return [num_input_features, squeeze_channels, expand1x1_channels, expand3x3_channels]
