import torch
import torch.nn as nn


class Model(nn.Module):
    """A ResNet basic block with a strided 1x1 projection shortcut (BatchNorm in training mode)."""

    expansion = 1

    def __init__(self, in_channels: int, out_channels: int, stride: int = 1):
        super().__init__()
        self.conv1 = nn.Conv2d(in_channels, out_channels, kernel_size=3, stride=stride, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(out_channels)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(out_channels, out_channels, kernel_size=3, stride=1, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(out_channels)
        self.downsample = nn.Sequential(
            nn.Conv2d(in_channels, out_channels * self.expansion, kernel_size=1, stride=stride, bias=False),
            nn.BatchNorm2d(out_channels * self.expansion),
        )

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = self.downsample(x)
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out = out + identity
        return self.relu(out)


batch_size = 32
in_channels = 32
out_channels = 64
stride = 2
size = 224

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 2, "in_channels": 4, "out_channels": 8, "size": 12}


def get_inputs():
    x = torch.randn(batch_size, in_channels, size, size)
    return [x]


def get_init_inputs():
    return [in_channels, out_channels, stride]
