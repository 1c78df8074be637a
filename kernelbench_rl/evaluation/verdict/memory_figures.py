"""Device-memory figures an out-of-memory verdict is decided and told with (verdict/faults.py), and the worker's memory
plan sizes budgets with (worker/memory.py): plain numbers and PyTorch's message, nothing measured here."""

from __future__ import annotations

import re

GIB = 1 << 30
MIB = 1 << 20

# A candidate may hold this many times the reference's peak (parameters + inputs + one forward) on the
# device, beyond the buffers the harness itself keeps in its process. Documented in the README.
CANDIDATE_MEMORY_FACTOR = 4


def gib(nbytes: float) -> str:
    return f"{nbytes / GIB:.1f} GiB"


_REQUESTED = re.compile(r"Tried to allocate ([0-9.]+) (B|KiB|MiB|GiB|TiB)")
_UNITS = {"B": 1, "KiB": 1 << 10, "MiB": MIB, "GiB": GIB, "TiB": 1 << 40}


def requested_bytes(message: str) -> int:
    """The size of the allocation that failed, from PyTorch's out-of-memory message (0 if absent)."""
    match = _REQUESTED.search(message)
    return int(float(match.group(1)) * _UNITS[match.group(2)]) if match else 0


def over_budget(reserved: int, requested: int, cap: int) -> bool:
    """Did the child's own allocations pass its budget? (Then an out-of-memory is the candidate's.)"""
    return cap > 0 and reserved + requested > cap
