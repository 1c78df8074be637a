# Sandbox threat: grab all GPU memory in 1 GiB blocks, keep it, and ask for more until the allocator fails.
import torch
import torch.nn as nn

_hoard = []


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        while True:
            _hoard.append(torch.empty(1 << 28, dtype=torch.float32, device=x.device).fill_(1.0))
