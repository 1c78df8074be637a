import torch
import torch.nn as nn


class Model(nn.Module):
    """Monte-Carlo estimate of pi from points in the unit square: four times the share of them that fall inside the
    quarter disc x^2 + y^2 <= 1. Returns a 0-d float32 tensor."""

    def __init__(self):
        super().__init__()

    def forward(self, random_points: torch.Tensor) -> torch.Tensor:
        x = random_points[:, 0]
        y = random_points[:, 1]
        inside = (x * x + y * y <= 1.0).float()
        return 4.0 * inside.sum() / random_points.shape[0]


num_samples = 10_000_000

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored elsewhere.
KBRL_SMALL_SIZES = {"num_samples": 20000}


def get_inputs():
    return [torch.rand(num_samples, 2)]


def get_init_inputs():
    return []
