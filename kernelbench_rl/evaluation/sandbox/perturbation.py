"""The sensitivity seeds' inputs, made alike in the worker and in the candidate's process: a seed's own inputs with a
few sites changed strongly, or the module's size constants set for a second shape (verdict/sensitivity.py says
which a problem gets and why). Torch and the standard library only.
"""

from __future__ import annotations

import contextlib
import math
import types
from collections.abc import Iterator, Sequence
from typing import Any

import torch

# Floating sites take values `strength` x (the tensor's range) x u above its maximum (u in [1, 4), per site),
# mildest first; 0.5 keeps them within a range's width of the maximum.
STRENGTHS = (0.5, 16.0, 1024.0)
MIN_ELEMENTS = 16  # smaller tensors (scalars, parameters) are not perturbed
_SALT = 0x5E251
_CHUNK = 1 << 24

Variant = dict[str, Any]


@contextlib.contextmanager
def constants_applied(module: types.ModuleType, variant: Variant | None) -> Iterator[None]:
    """The module's size constants as the variant sets them (a second shape), put back afterwards."""
    constants = (variant or {}).get("constants") or {}
    saved = {name: getattr(module, name) for name in constants}
    try:
        for name, value in constants.items():
            setattr(module, name, int(value))
        yield
    finally:
        for name, value in saved.items():
            setattr(module, name, value)


def perturbable(inputs: Sequence[Any]) -> list[int]:
    """The inputs a perturbation changes: every floating tensor of MIN_ELEMENTS or more; with none, every such
    integer tensor (not booleans: masks and flags keep their structure)."""
    def large(x: Any) -> bool:
        return isinstance(x, torch.Tensor) and x.numel() >= MIN_ELEMENTS

    floating = [i for i, x in enumerate(inputs) if large(x) and x.is_floating_point()]
    if floating:
        return floating
    return [i for i, x in enumerate(inputs)
            if large(x) and not x.is_floating_point() and not x.is_complex() and x.dtype != torch.bool]


def perturb_inputs(inputs: list[Any], seed: int, variant: Variant | None) -> list[Any]:
    """The variant's perturbation applied in place (inputs are made fresh for every seed)."""
    spec = (variant or {}).get("perturb")
    if not spec:
        return inputs
    generator = torch.Generator().manual_seed((int(seed) * 1_000_003 + _SALT) % (2**63))
    for index in perturbable(inputs):
        _perturb(inputs[index], spec, generator)
    return inputs


def _finite_range(flat: torch.Tensor) -> tuple[float, float]:
    low, high = math.inf, -math.inf
    for start in range(0, flat.numel(), _CHUNK):
        chunk = flat[start:start + _CHUNK]
        a, b = (float(v) for v in torch.aminmax(chunk))
        if not (math.isfinite(a) and math.isfinite(b)):
            finite = chunk[torch.isfinite(chunk)]
            if not finite.numel():
                continue
            a, b = (float(v) for v in torch.aminmax(finite))
        low, high = min(low, a), max(high, b)
    if not math.isfinite(low):
        return 0.0, 0.0
    return low, high


def _symmetric(t: torch.Tensor) -> bool:
    if t.dim() < 2 or t.shape[-1] != t.shape[-2] or t.shape[-1] < 2:
        return False
    m = min(64, t.shape[-1])
    corner = t[(0,) * (t.dim() - 2)][:m, :m]
    return torch.equal(corner, corner.mT) and torch.equal(t, t.mT)


def _sorted_last(t: torch.Tensor) -> bool:
    if t.dim() < 1 or t.shape[-1] < 2:
        return False
    first = t.reshape(-1, t.shape[-1])[0]
    if not bool((first[1:] >= first[:-1]).all()):
        return False
    return bool((t[..., 1:] >= t[..., :-1]).all())


def _sites(n: int, spec: dict[str, Any]) -> int:
    return max(1, min(int(spec["sites"]), n))


def site_length(n: int, spec: dict[str, Any]) -> int:
    """A site's length in a tensor of n elements: the spec's length, at most half a stratum."""
    stratum = n // _sites(n, spec)
    return max(1, min(int(spec["length"]), stratum // 2))


def _perturb(t: torch.Tensor, spec: dict[str, Any], generator: torch.Generator) -> None:
    n = t.numel()
    k = _sites(n, spec)
    length = site_length(n, spec)
    only = spec.get("only")
    floating = t.is_floating_point()
    symmetric = floating and _symmetric(t)
    sort_after = _sorted_last(t)
    original = t.clone() if symmetric else None
    work = t.view(-1) if t.is_contiguous() else t.reshape(-1).clone()
    if floating:
        low, high = _finite_range(work)
        span = high - low if high > low else max(abs(high), 1.0)
        strength = float(spec.get("strength") or STRENGTHS[0])
    for site in range(k):
        begin, end = site * n // k, (site + 1) * n // k
        start = begin + int(torch.randint(0, max(1, end - begin - length + 1), (1,), generator=generator))
        u = 2.0 ** (2.0 * float(torch.rand((), generator=generator)))
        source = int(torch.randint(0, n, (1,), generator=generator))
        if only is not None and site != int(only):
            continue
        segment = work[start:start + length]
        if floating:
            ramp = torch.arange(segment.numel(), device=t.device, dtype=torch.float32) / max(1, segment.numel())
            values = (high + span * strength * u * (1.0 + 0.5 * ramp)).to(t.dtype)
        else:
            values = work[source].expand(segment.numel())
        segment.copy_(torch.where(segment != 0, values, segment))
    if work.data_ptr() != t.data_ptr() or not t.is_contiguous():
        t.copy_(work.view(t.shape))
    if original is not None:
        changed = t != original
        t.copy_(torch.where(changed, t, torch.where(changed.mT, t.mT, t)))
        both = changed & changed.mT
        t.copy_(torch.where(both, torch.maximum(t, t.mT), t))
    if sort_after:
        t.copy_(t.sort(dim=-1).values)
