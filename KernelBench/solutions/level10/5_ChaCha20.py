import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rotl32(x, bits: tl.constexpr):
    # Words live in int64 lanes with values below 2^32, so shifts never lose bits before the mask.
    return ((x << bits) | (x >> (32 - bits))) & 0xFFFFFFFF


@triton.jit
def _quarter_round(a, b, c, d):
    a = (a + b) & 0xFFFFFFFF
    d = _rotl32(d ^ a, 16)
    c = (c + d) & 0xFFFFFFFF
    b = _rotl32(b ^ c, 12)
    a = (a + b) & 0xFFFFFFFF
    d = _rotl32(d ^ a, 8)
    c = (c + d) & 0xFFFFFFFF
    b = _rotl32(b ^ c, 7)
    return a, b, c, d


@triton.jit
def chacha20_block_kernel(constants_ptr, key_ptr, nonce_ptr, counter, out_ptr):
    """The block function on one 16-word state: 10 double rounds, then the input state added back."""
    s0 = tl.load(constants_ptr + 0)
    s1 = tl.load(constants_ptr + 1)
    s2 = tl.load(constants_ptr + 2)
    s3 = tl.load(constants_ptr + 3)
    s4 = tl.load(key_ptr + 0)
    s5 = tl.load(key_ptr + 1)
    s6 = tl.load(key_ptr + 2)
    s7 = tl.load(key_ptr + 3)
    s8 = tl.load(key_ptr + 4)
    s9 = tl.load(key_ptr + 5)
    s10 = tl.load(key_ptr + 6)
    s11 = tl.load(key_ptr + 7)
    s12 = s0 * 0 + counter  # int64, like the other words
    s13 = tl.load(nonce_ptr + 0)
    s14 = tl.load(nonce_ptr + 1)
    s15 = tl.load(nonce_ptr + 2)
    x0, x1, x2, x3, x4, x5, x6, x7 = s0, s1, s2, s3, s4, s5, s6, s7
    x8, x9, x10, x11, x12, x13, x14, x15 = s8, s9, s10, s11, s12, s13, s14, s15
    for _ in range(10):
        # Columns.
        x0, x4, x8, x12 = _quarter_round(x0, x4, x8, x12)
        x1, x5, x9, x13 = _quarter_round(x1, x5, x9, x13)
        x2, x6, x10, x14 = _quarter_round(x2, x6, x10, x14)
        x3, x7, x11, x15 = _quarter_round(x3, x7, x11, x15)
        # Diagonals.
        x0, x5, x10, x15 = _quarter_round(x0, x5, x10, x15)
        x1, x6, x11, x12 = _quarter_round(x1, x6, x11, x12)
        x2, x7, x8, x13 = _quarter_round(x2, x7, x8, x13)
        x3, x4, x9, x14 = _quarter_round(x3, x4, x9, x14)
    tl.store(out_ptr + 0, (x0 + s0) & 0xFFFFFFFF)
    tl.store(out_ptr + 1, (x1 + s1) & 0xFFFFFFFF)
    tl.store(out_ptr + 2, (x2 + s2) & 0xFFFFFFFF)
    tl.store(out_ptr + 3, (x3 + s3) & 0xFFFFFFFF)
    tl.store(out_ptr + 4, (x4 + s4) & 0xFFFFFFFF)
    tl.store(out_ptr + 5, (x5 + s5) & 0xFFFFFFFF)
    tl.store(out_ptr + 6, (x6 + s6) & 0xFFFFFFFF)
    tl.store(out_ptr + 7, (x7 + s7) & 0xFFFFFFFF)
    tl.store(out_ptr + 8, (x8 + s8) & 0xFFFFFFFF)
    tl.store(out_ptr + 9, (x9 + s9) & 0xFFFFFFFF)
    tl.store(out_ptr + 10, (x10 + s10) & 0xFFFFFFFF)
    tl.store(out_ptr + 11, (x11 + s11) & 0xFFFFFFFF)
    tl.store(out_ptr + 12, (x12 + s12) & 0xFFFFFFFF)
    tl.store(out_ptr + 13, (x13 + s13) & 0xFFFFFFFF)
    tl.store(out_ptr + 14, (x14 + s14) & 0xFFFFFFFF)
    tl.store(out_ptr + 15, (x15 + s15) & 0xFFFFFFFF)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("constants", torch.tensor([0x61707865, 0x3320646E, 0x79622D32, 0x6B206574], dtype=torch.int64))

    def forward(self, key: torch.Tensor, nonce: torch.Tensor, counter: int = 0) -> torch.Tensor:
        out = torch.empty(16, device=key.device, dtype=torch.int64)
        chacha20_block_kernel[(1,)](self.constants, key.contiguous(), nonce.contiguous(), int(counter), out)
        return out
