import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def linear_kernel(x_ptr, w_ptr, y_ptr, M, N, K, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    """y[M, N] = x[M, K] @ w[N, K]^T, all row-major (nn.Linear without bias)."""
    offs_m = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    offs_k = tl.arange(0, BLOCK_K)
    rows = offs_m.to(tl.int64)
    cols = offs_n.to(tl.int64)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        k = k0 + offs_k
        a = tl.load(x_ptr + rows[:, None] * K + k[None, :], mask=(offs_m[:, None] < M) & (k[None, :] < K), other=0.0)
        b = tl.load(w_ptr + cols[None, :] * K + k[:, None], mask=(k[:, None] < K) & (offs_n[None, :] < N), other=0.0)
        acc = tl.dot(a, b, acc, input_precision="ieee")  # full fp32, not TF32
    tl.store(y_ptr + rows[:, None] * N + cols[None, :], acc, mask=(offs_m[:, None] < M) & (offs_n[None, :] < N))


@triton.jit
def rope_kernel(x_ptr, inv_freq_ptr, out_ptr, ROWS, S, WIDTH, D, BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr):
    """Rotary embedding of a (BLOCK_R, BLOCK_C) tile of x, laid out (batch * seq, heads * D): element d
    of a head pairs with d + D/2 (mod D) and turns by position * inv_freq[d mod D/2]."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)[:, None]
    cols = tl.program_id(1) * BLOCK_C + tl.arange(0, BLOCK_C)[None, :]
    mask = (rows < ROWS) & (cols < WIDTH)
    half = D // 2
    d = cols % D
    partner_cols = cols - d + (d + half) % D
    row_base = rows.to(tl.int64) * WIDTH
    x = tl.load(x_ptr + row_base + cols, mask=mask, other=0.0)
    partner = tl.load(x_ptr + row_base + partner_cols, mask=mask, other=0.0)
    rotated = tl.where(d < half, -partner, partner)
    position = (rows % S).to(tl.float32)
    angle = position * tl.load(inv_freq_ptr + d % half, mask=cols < WIDTH, other=0.0)  # the reference's fp32 product
    # Reduce the angle (up to thousands of radians) to [-pi, pi] in fp64 first, so cos/sin stay accurate
    # whatever the device's fp32 sin/cos do with large arguments.
    two_pi = tl.full((BLOCK_R, BLOCK_C), 6.283185307179586, tl.float64)
    wide = angle.to(tl.float64)
    reduced = (wide - two_pi * tl.floor(wide / two_pi + 0.5)).to(tl.float32)
    tl.store(out_ptr + row_base + cols, x * tl.cos(reduced) + rotated * tl.sin(reduced), mask=mask)


@triton.jit
def gqa_attention_kernel(q_ptr, k_ptr, v_ptr, out_ptr, S, HEADS, KV_HEADS, GROUP, D, scale,
                         BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_D: tl.constexpr):
    """Causal attention for BLOCK_M queries of one (batch, query head), streaming keys and values
    of the shared head (head // GROUP) in place with an online softmax. q and out are (batch * seq,
    HEADS * D); k and v are (batch * seq, KV_HEADS * D)."""
    block_m = tl.program_id(0)
    batch = tl.program_id(1) // HEADS
    head = tl.program_id(1) % HEADS
    kv_head = head // GROUP
    offs_m = block_m * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_n = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, BLOCK_D)
    d_mask = offs_d < D
    q_rows = (batch * S + offs_m).to(tl.int64)
    q = tl.load(q_ptr + (q_rows[:, None] * HEADS + head) * D + offs_d[None, :],
                mask=(offs_m[:, None] < S) & d_mask[None, :], other=0.0)
    row_max = tl.full((BLOCK_M,), float("-inf"), tl.float32)
    row_sum = tl.zeros((BLOCK_M,), tl.float32)
    acc = tl.zeros((BLOCK_M, BLOCK_D), tl.float32)
    end = tl.minimum(S, (block_m + 1) * BLOCK_M)  # causal: no key after the block's last query
    for start in range(0, end, BLOCK_N):
        keys = start + offs_n
        kv_rows = (batch * S + keys).to(tl.int64)
        kv_offs = (kv_rows[:, None] * KV_HEADS + kv_head) * D + offs_d[None, :]
        kv_mask = (keys[:, None] < S) & d_mask[None, :]
        k = tl.load(k_ptr + kv_offs, mask=kv_mask, other=0.0)
        v = tl.load(v_ptr + kv_offs, mask=kv_mask, other=0.0)
        scores = tl.dot(q, tl.trans(k), input_precision="ieee") * scale
        allowed = (keys[None, :] <= offs_m[:, None]) & (keys[None, :] < S)
        scores = tl.where(allowed, scores, float("-inf"))
        # Key 0 is allowed for every query, so the first block makes every row's max finite.
        new_max = tl.maximum(row_max, tl.max(scores, axis=1))
        correction = tl.exp(row_max - new_max)
        p = tl.exp(scores - new_max[:, None])
        row_sum = row_sum * correction + tl.sum(p, axis=1)
        acc = acc * correction[:, None] + tl.dot(p, v, input_precision="ieee")
        row_max = new_max
    out = acc / row_sum[:, None]
    tl.store(out_ptr + (q_rows[:, None] * HEADS + head) * D + offs_d[None, :], out,
             mask=(offs_m[:, None] < S) & d_mask[None, :])


class ModelNew(nn.Module):
    def __init__(self, hidden_size: int, num_attention_heads: int, num_key_value_heads: int, head_dim: int,
                 max_position_embeddings: int = 4096, rope_theta: float = 10000.0, attention_dropout: float = 0.0):
        super().__init__()
        self.num_heads = num_attention_heads
        self.num_kv_heads = num_key_value_heads
        self.head_dim = head_dim
        self.group = num_attention_heads // num_key_value_heads
        self.scale = head_dim ** -0.5
        # Built in the reference's order, so one seed gives both models the same weights.
        self.q_proj = nn.Linear(hidden_size, num_attention_heads * head_dim, bias=False)
        self.k_proj = nn.Linear(hidden_size, num_key_value_heads * head_dim, bias=False)
        self.v_proj = nn.Linear(hidden_size, num_key_value_heads * head_dim, bias=False)
        self.o_proj = nn.Linear(num_attention_heads * head_dim, hidden_size, bias=False)
        exponents = torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim
        self.register_buffer("inv_freq", 1.0 / (rope_theta ** exponents), persistent=False)

    @staticmethod
    def _linear(x: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        M, K = x.shape
        N = weight.shape[0]
        y = torch.empty((M, N), device=x.device, dtype=torch.float32)
        linear_kernel[(triton.cdiv(M, 64), triton.cdiv(N, 64))](x, weight.contiguous(), y, M, N, K,
                                                                 BLOCK_M=64, BLOCK_N=64, BLOCK_K=32)
        return y

    def _rope(self, x: torch.Tensor, seq: int) -> torch.Tensor:
        rows, width = x.shape
        out = torch.empty_like(x)
        grid = (triton.cdiv(rows, 16), triton.cdiv(width, 128))
        rope_kernel[grid](x, self.inv_freq, out, rows, seq, width, self.head_dim, BLOCK_R=16, BLOCK_C=128)
        return out

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        batch, seq, hidden = hidden_states.shape
        x = hidden_states.contiguous().view(batch * seq, hidden)
        q = self._rope(self._linear(x, self.q_proj.weight), seq)
        k = self._rope(self._linear(x, self.k_proj.weight), seq)
        v = self._linear(x, self.v_proj.weight)
        attn = torch.empty_like(q)
        block_d = max(16, triton.next_power_of_2(self.head_dim))
        grid = (triton.cdiv(seq, 32), batch * self.num_heads)
        gqa_attention_kernel[grid](q, k, v, attn, seq, self.num_heads, self.num_kv_heads, self.group, self.head_dim,
                                   self.scale, BLOCK_M=32, BLOCK_N=32, BLOCK_D=block_d, num_warps=4)
        return self._linear(attn, self.o_proj.weight).view(batch, seq, hidden)
