import torch
import torch.nn as nn


class Model(nn.Module):
    """LayerNorm over the last (hidden) dimension of a (batch, seq, hidden) tensor, with affine weights."""

    def __init__(self, hidden: int):
        super().__init__()
        self.ln = nn.LayerNorm(hidden)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x)


batch_size = 32
seq_len = 4096
hidden = 2048

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 2, "seq_len": 8, "hidden": 200}


def get_inputs():
    x = torch.randn(batch_size, seq_len, hidden)
    return [x]


def get_init_inputs():
    return [hidden]
