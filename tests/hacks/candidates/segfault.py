# Sandbox threat: the process dies of SIGSEGV (a NULL dereference in C) in the middle of forward.
import faulthandler

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        faulthandler.disable()
        faulthandler._sigsegv()
        return x
