import torch
import torch.nn as nn


class Model(nn.Module):
    """256-bin histogram of byte values (a grayscale image's pixels), counts returned as float32.
    Values are clamped to [0, 255] first."""

    def __init__(self):
        super().__init__()

    def forward(self, data: torch.Tensor) -> torch.Tensor:
        values = data.long().clamp(0, 255)
        return torch.bincount(values, minlength=256).float()


num_pixels = 4 * 1024 * 1024

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored elsewhere.
KBRL_SMALL_SIZES = {"num_pixels": 5000}


def get_inputs():
    return [torch.randint(0, 256, (num_pixels,), dtype=torch.long)]


def get_init_inputs():
    return []
