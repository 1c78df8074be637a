import torch
import torch.nn as nn

MASK32 = 0xFFFFFFFF


class Model(nn.Module):
    """One 64-byte ChaCha20 keystream block (RFC 8439's block function): the 4x4 state of 32-bit
    words (constants, 256-bit key, block counter, 96-bit nonce) goes through 20 rounds (10 column
    and diagonal double rounds) and is added to itself word by word, mod 2^32.

    Words are held in int64 tensors with values in [0, 2^32); the output is (16,) int64, compared
    exactly.
    """

    def __init__(self):
        super().__init__()
        # "expand 32-byte k" as four little-endian words.
        self.register_buffer("constants", torch.tensor([0x61707865, 0x3320646E, 0x79622D32, 0x6B206574], dtype=torch.int64))

    @staticmethod
    def _rotate_left(x: torch.Tensor, bits: int) -> torch.Tensor:
        return ((x << bits) | (x >> (32 - bits))) & MASK32

    def _quarter_round(self, s: torch.Tensor, a: int, b: int, c: int, d: int) -> torch.Tensor:
        s = s.clone()
        for x, y, z, bits in ((a, b, d, 16), (c, d, b, 12), (a, b, d, 8), (c, d, b, 7)):
            s[x] = (s[x] + s[y]) & MASK32
            s[z] = self._rotate_left(s[z] ^ s[x], bits)
        return s

    def forward(self, key: torch.Tensor, nonce: torch.Tensor, counter: int = 0) -> torch.Tensor:
        state = torch.zeros(16, dtype=torch.int64, device=key.device)
        state[0:4] = self.constants
        state[4:12] = key
        state[12] = counter
        state[13:16] = nonce
        work = state.clone()
        for _ in range(10):
            for a, b, c, d in ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                               (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14)):
                work = self._quarter_round(work, a, b, c, d)
        return (work + state) & MASK32


# No sizes: one block is the whole problem.
KBRL_SMALL_SIZES = {}


def get_inputs():
    key = torch.randint(0, 2**32, (8,), dtype=torch.int64)
    nonce = torch.randint(0, 2**32, (3,), dtype=torch.int64)
    return [key, nonce, 0]


def get_init_inputs():
    return []
