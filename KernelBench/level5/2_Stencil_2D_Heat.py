import torch
import torch.nn as nn


class Model(nn.Module):
    """One Jacobi sweep of the 2D heat (Laplace) equation with a 5-point stencil: every interior
    cell becomes the mean of its four neighbours; the boundary rows and columns are kept."""

    def __init__(self):
        super().__init__()

    def forward(self, u: torch.Tensor) -> torch.Tensor:
        out = u.clone()
        neighbours = u[:-2, 1:-1] + u[2:, 1:-1] + u[1:-1, :-2] + u[1:-1, 2:]
        out[1:-1, 1:-1] = 0.25 * neighbours
        return out


grid_height = 2048
grid_width = 2048

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored elsewhere.
KBRL_SMALL_SIZES = {"grid_height": 37, "grid_width": 70}


def get_inputs():
    u = torch.randn(grid_height, grid_width)
    # Dirichlet boundary: 1 on the top and left edges, 0 on the bottom and right ones.
    u[0, :] = 1.0
    u[-1, :] = 0.0
    u[:, 0] = 1.0
    u[:, -1] = 0.0
    return [u]


def get_init_inputs():
    return []
