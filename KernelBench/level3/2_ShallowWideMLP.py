import torch
import torch.nn as nn


class Model(nn.Module):
    """A shallow, wide MLP: two wide hidden layers with ReLU, then a Linear output layer."""

    def __init__(self, input_size: int, hidden_layer_sizes: list, output_size: int):
        super().__init__()
        layers = []
        current = input_size
        for size in hidden_layer_sizes:
            layers.append(nn.Linear(current, size))
            layers.append(nn.ReLU())
            current = size
        layers.append(nn.Linear(current, output_size))
        self.network = nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.network(x)


batch_size = 128
input_size = 16384
hidden_layer_sizes = [32768, 32768]
output_size = 16384

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 4, "input_size": 32, "hidden_layer_sizes": [96, 96], "output_size": 16}


def get_inputs():
    x = torch.rand(batch_size, input_size)
    return [x]


def get_init_inputs():
    return [input_size, hidden_layer_sizes, output_size]
