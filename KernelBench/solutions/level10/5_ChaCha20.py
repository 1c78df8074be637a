import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _rotl32(x, bits: tl.constexpr):
    # Words live in int64 lanes with values below 2^32, so shifts never lose bits before the mask.
    return ((x << bits) | (x >> (32 - bits))) & 0xFFFFFFFF


@triton.jit
def _rotate_lanes(v, shift: tl.constexpr):
    """out[i] = v[(i + shift) % 4] for a 4-lane vector (a select and a row sum: exact for integers)."""
    lane = tl.arange(0, 4)
    pick = lane[None, :] == (lane[:, None] + shift) % 4
    return tl.sum(tl.where(pick, v[None, :], 0), axis=1)


@triton.jit
def _quarter_rounds(a, b, c, d):
    """Four quarter rounds at once, lane i on (a[i], b[i], c[i], d[i])."""
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
    """The block function on the 4x4 word state held as four rows: 10 double rounds (columns, then
    diagonals by turning rows 1-3 left by 1-3 lanes and back), then the input state added back."""
    lane = tl.arange(0, 4)
    row0 = tl.load(constants_ptr + lane)
    row1 = tl.load(key_ptr + lane)
    row2 = tl.load(key_ptr + 4 + lane)
    # Row 3: the counter, then the three nonce words.
    row3 = tl.where(lane == 0, counter, tl.load(nonce_ptr + lane - 1, mask=lane > 0, other=0)).to(tl.int64)
    a, b, c, d = row0, row1, row2, row3
    for _ in range(10):
        a, b, c, d = _quarter_rounds(a, b, c, d)  # columns
        a, b, c, d = _quarter_rounds(a, _rotate_lanes(b, 1), _rotate_lanes(c, 2), _rotate_lanes(d, 3))  # diagonals
        b, c, d = _rotate_lanes(b, 3), _rotate_lanes(c, 2), _rotate_lanes(d, 1)
    tl.store(out_ptr + lane, (a + row0) & 0xFFFFFFFF)
    tl.store(out_ptr + 4 + lane, (b + row1) & 0xFFFFFFFF)
    tl.store(out_ptr + 8 + lane, (c + row2) & 0xFFFFFFFF)
    tl.store(out_ptr + 12 + lane, (d + row3) & 0xFFFFFFFF)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("constants", torch.tensor([0x61707865, 0x3320646E, 0x79622D32, 0x6B206574], dtype=torch.int64))

    def forward(self, key: torch.Tensor, nonce: torch.Tensor, counter: int = 0) -> torch.Tensor:
        out = torch.empty(16, device=key.device, dtype=torch.int64)
        chacha20_block_kernel[(1,)](self.constants, key.contiguous(), nonce.contiguous(), int(counter), out)
        return out
