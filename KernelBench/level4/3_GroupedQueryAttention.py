import torch
import torch.nn as nn
import torch.nn.functional as F


class Model(nn.Module):
    """Grouped-query attention (Llama 3 style): num_attention_heads query heads share
    num_key_value_heads key/value heads, rotary position embeddings on queries and keys, a causal
    mask, then an output projection. All projections are bias-free.

    The reference widens K and V to one copy per query head before the attention product; a fused
    kernel can read each shared head in place instead. attention_dropout is kept for the signature;
    the problem is posed with 0.0, so no dropout is applied (outputs are deterministic).
    """

    def __init__(
        self,
        hidden_size: int,
        num_attention_heads: int,
        num_key_value_heads: int,
        head_dim: int,
        max_position_embeddings: int = 4096,
        rope_theta: float = 10000.0,
        attention_dropout: float = 0.0,
    ):
        super().__init__()
        if attention_dropout != 0.0:
            raise ValueError("this problem is posed without attention dropout (attention_dropout=0.0)")
        self.num_heads = num_attention_heads
        self.num_kv_heads = num_key_value_heads
        self.head_dim = head_dim
        self.group = num_attention_heads // num_key_value_heads
        self.scale = head_dim ** -0.5
        self.max_position_embeddings = max_position_embeddings
        self.q_proj = nn.Linear(hidden_size, num_attention_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_key_value_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_key_value_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_attention_heads * head_dim, hidden_size, bias=False)
        # Rotary frequencies: theta^(-2i/head_dim) for i < head_dim / 2.
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
        self.register_buffer("inv_freq", 1.0 / (rope_theta ** exponents), persistent=False)

    def _rope(self, x: torch.Tensor) -> torch.Tensor:
        """Rotate each (d, d + head_dim/2) pair of x (batch, heads, seq, head_dim) by position * freq."""
        positions = torch.arange(x.shape[-2], device=x.device, dtype=torch.float32)
        angles = torch.outer(positions, self.inv_freq)
        angles = torch.cat((angles, angles), dim=-1)
        cos, sin = angles.cos()[None, None], angles.sin()[None, None]
        half = x.shape[-1] // 2
        rotated = torch.cat((-x[..., half:], x[..., :half]), dim=-1)
        return x * cos + rotated * sin

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        batch, seq, _ = hidden_states.shape
        q = self.q_proj(hidden_states).view(batch, seq, self.num_heads, self.head_dim).transpose(1, 2)
        k = self.k_proj(hidden_states).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        v = self.v_proj(hidden_states).view(batch, seq, self.num_kv_heads, self.head_dim).transpose(1, 2)
        q, k = self._rope(q), self._rope(k)
        # One copy of each key/value head per query head of its group.
        k = k.repeat_interleave(self.group, dim=1)
        v = v.repeat_interleave(self.group, dim=1)
        scores = torch.matmul(q, k.transpose(2, 3)) * self.scale
        future = torch.triu(torch.ones(seq, seq, dtype=torch.bool, device=hidden_states.device), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        weights = F.softmax(scores, dim=-1, dtype=torch.float32).to(q.dtype)
        out = torch.matmul(weights, v).transpose(1, 2).reshape(batch, seq, self.num_heads * self.head_dim)
        return self.o_proj(out)


# 4:1 grouping, Llama 3 70B's head shape on fewer heads.
batch_size = 4
seq_len = 2048
hidden_size = 4096
num_attention_heads = 32
num_key_value_heads = 8
head_dim = 128
max_position_embeddings = 4096

# Sizes small enough for Triton's CPU interpreter (kernelbench-rl); ignored elsewhere.
KBRL_SMALL_SIZES = {
    "batch_size": 2, "seq_len": 40, "hidden_size": 32, "num_attention_heads": 4,
    "num_key_value_heads": 2, "head_dim": 16, "max_position_embeddings": 64,
}


def get_inputs():
    return [torch.randn(batch_size, seq_len, hidden_size)]


def get_init_inputs():
    return [hidden_size, num_attention_heads, num_key_value_heads, head_dim, max_position_embeddings]
