# Sandbox threat: forward never returns (a busy loop holding the GIL).
import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        spins = 0
        while spins >= 0:
            spins += 1
        return x
