import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """A 1D FIR filter with a random kernel of odd length and 'same' zero padding:
    out[i] = sum_j signal[i + j - kernel_size // 2] * kernel[j] (cross-correlation, as conv1d).
    The signal is (N,) or (batch, N); the output has its shape."""

    def __init__(self, kernel_size: int = 127):
        super().__init__()
        self.kernel_size = kernel_size
        self.register_buffer("kernel", torch.randn(1, 1, kernel_size))

    def forward(self, signal: torch.Tensor) -> torch.Tensor:
        rows = signal.reshape(-1, 1, signal.shape[-1])
        out = F.conv1d(rows, self.kernel, padding=self.kernel_size // 2)
        return out.reshape(signal.shape)


signal_length = 1024 * 1024

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored elsewhere.
KBRL_SMALL_SIZES = {"signal_length": 1200}


def get_inputs():
    return [torch.randn(signal_length)]


def get_init_inputs():
    return [127]
