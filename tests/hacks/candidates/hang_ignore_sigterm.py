# Sandbox threat: at import, ignore the polite signals, then sleep forever: only SIGKILL ends it.
import signal
import time

import torch
import torch.nn as nn

for _sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGALRM):
    signal.signal(_sig, signal.SIG_IGN)
while True:
    time.sleep(1.0)


class ModelNew(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x
