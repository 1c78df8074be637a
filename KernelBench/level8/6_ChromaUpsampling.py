import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """4:2:0 to 4:4:4 chroma upsampling: U and V planes of half height and width are resized to the
    luma plane's (H, W) by bilinear interpolation (align_corners=False). Returns (Y, U, V), Y as given."""

    def __init__(self):
        super().__init__()

    def forward(self, y_full: torch.Tensor, u_half: torch.Tensor, v_half: torch.Tensor) -> tuple:
        size = tuple(y_full.shape)

        def upsample(plane: torch.Tensor) -> torch.Tensor:
            return F.interpolate(plane[None, None], size=size, mode="bilinear", align_corners=False)[0, 0]

        return y_full, upsample(u_half), upsample(v_half)


# 1080p
frame_height = 1080
frame_width = 1920

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored elsewhere.
KBRL_SMALL_SIZES = {"frame_height": 30, "frame_width": 46}


def get_inputs():
    y = torch.rand(frame_height, frame_width)
    u = torch.rand(frame_height // 2, frame_width // 2)
    v = torch.rand(frame_height // 2, frame_width // 2)
    return [y, u, v]


def get_init_inputs():
    return []
