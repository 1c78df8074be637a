import math

import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Multi-head causal self-attention as in minGPT (no dropout), with an output projection."""

    def __init__(self, n_embd: int, n_head: int, max_seqlen: int):
        super().__init__()
        assert n_embd % n_head == 0
        self.c_attn = nn.Linear(n_embd, 3 * n_embd)
        self.c_proj = nn.Linear(n_embd, n_embd)
        self.register_buffer(
            "bias", torch.tril(torch.ones(max_seqlen, max_seqlen)).view(1, 1, max_seqlen, max_seqlen)
        )
        self.n_head = n_head
        self.n_embd = n_embd

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        B, T, C = x.size()
        q, k, v = self.c_attn(x).split(self.n_embd, dim=2)
        k = k.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        q = q.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        v = v.view(B, T, self.n_head, C // self.n_head).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        att = F.softmax(att, dim=-1)
        y = att @ v
        y = y.transpose(1, 2).contiguous().view(B, T, C)
        return self.c_proj(y)


batch_size = 32
seq_len = 512
n_embd = 768
n_head = 12
max_seqlen = 512

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored by KernelBench.
KBRL_SMALL_SIZES = {"batch_size": 2, "seq_len": 8, "n_embd": 16, "n_head": 2, "max_seqlen": 8}


def get_inputs():
    x = torch.randn(batch_size, seq_len, n_embd)
    return [x]


def get_init_inputs():
    return [n_embd, n_head, max_seqlen]
