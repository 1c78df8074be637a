"""Runnable examples of the rules against work done outside the candidate's kernels, on KernelBench's L1/19 (ReLU):
each computes the right answer in PyTorch, NumPy or Python and launches a token one-element kernel, so only a rule
(statically) or the compute account (at run time) can tell. Keyed by the rule whose pattern it is (None: no rule,
the runtime account alone)."""

from __future__ import annotations

PROBLEM = "L1/19"

HEAD = '''import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
import triton
import triton.language as tl


@triton.jit
def touch_kernel(out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.load(out_ptr + offs, mask=mask), mask=mask)
'''

# (rule, case id, lines of the forward before the token launch; `x` in, `out` out)
EXAMPLES: list[tuple[str | None, str, str]] = [
    ("torch_compute", "torch_relu", "out = torch.relu(x)"),
    ("torch_compute", "tensor_method", "out = x.relu()"),
    ("torch_compute", "functional", "out = F.relu(x)"),
    ("torch_compute", "aten_op", "out = torch.ops.aten.relu.default(x)"),
    ("torch_compute", "clamp_keyword", "out = x.clamp(min=0.0)"),
    ("tensor_operators", "multiply_mask", "out = x * (x > 0)"),
    ("dynamic_code", "exec_string", 'scope = {"x": x}\nexec("out = x.clamp(min=0.0)", scope)\nout = scope["out"]'),
    (None, "numpy_maximum", "out = torch.as_tensor(np.maximum(x, 0.0))"),
    (None, "python_lists", "out = torch.tensor([v if v > 0 else 0.0 for v in x.flatten().tolist()]).view(x.shape)"),
]


def source(body: str) -> str:
    lines = body.split("\n") + ["touch_kernel[(1,)](out, 1, BLOCK=16)", "return out"]
    forward = "".join(f"        {line}\n" for line in lines)
    return f"{HEAD}\n\nclass ModelNew(nn.Module):\n    def forward(self, x):\n{forward}"
