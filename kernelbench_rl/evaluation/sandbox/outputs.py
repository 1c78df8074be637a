"""What a candidate's forward returned, judged in its own process before anything else touches it.

Outputs must be exactly `torch.Tensor` objects (Python scalars are wrapped). A `torch.Tensor` subclass can
carry a `__torch_function__` that runs the real work the first time the output is read (its dtype, a copy
for the worker), after the timer has stopped; so the raw object is inspected with `type()` only: no
attribute access, no method call, nothing a subclass could intercept.

Which input an output shares memory with (it is the input, or a view of it) is reported per output; the
worker decides whether the reference does the same at that position. Worker side only (torch, stdlib).
"""

from __future__ import annotations

from typing import Any

import torch

_MAX_DEPTH = 8
_NAME_CHARS = 80


class ForeignOutput(Exception):
    """forward returned something that is not exactly a tensor; `hack` when it is a torch.Tensor subclass."""

    def __init__(self, message: str, hack: bool) -> None:
        super().__init__(message)
        self.message = message
        self.hack = hack


def _class_name(cls: type) -> str:
    # Through type's own descriptor: a metaclass of the candidate's could make `cls.__name__` run code.
    return str(type.__dict__["__qualname__"].__get__(cls))[:_NAME_CHARS]


def _is_tensor_subclass(cls: type) -> bool:
    return any(base is torch.Tensor for base in type.__dict__["__mro__"].__get__(cls))


def plain_outputs(value: Any, _depth: int = 0) -> list[torch.Tensor]:
    """The flattened outputs (tuples and lists walked), each exactly a torch.Tensor; raises ForeignOutput naming
    the first other class found."""
    kind = type(value)
    if kind is torch.Tensor:
        return [value]
    if kind is int or kind is float or kind is bool:  # (identity: `in` would call a metaclass's __eq__)
        return [torch.tensor(value)]
    # Tuple and list subclasses (torch.return_types, named tuples) are walked by the base type's own iterator,
    # so an overridden __iter__ or __getitem__ never runs; issubclass reads the class's C-level MRO.
    walk = tuple.__iter__ if issubclass(kind, tuple) else list.__iter__ if issubclass(kind, list) else None
    if walk is not None and _depth < _MAX_DEPTH:
        flat: list[torch.Tensor] = []
        for item in walk(value):
            flat.extend(plain_outputs(item, _depth + 1))
        return flat
    name = _class_name(kind)
    if _is_tensor_subclass(kind):
        raise ForeignOutput(f"forward returned an object of class {name}, a torch.Tensor subclass; outputs must be "
                            "plain torch.Tensor objects", hack=True)
    raise ForeignOutput(f"forward returned {name}, expected a tensor or a tuple of tensors", hack=False)


def _span(tensor: torch.Tensor) -> tuple[str, int, int] | None:
    storage = tensor.untyped_storage()
    size = storage.nbytes()
    if size == 0:
        return None
    start = storage.data_ptr()
    return str(tensor.device), start, start + size


def input_aliases(outputs: list[torch.Tensor], inputs: list[Any]) -> list[int | None]:
    """For each output, the position (among the tensor inputs) of the input whose memory it shares, or None.

    Storages are compared by address range, so a view, a reshape and the input itself all count. Call it only
    on tensors `plain_outputs` returned."""
    spans = [_span(x) for x in inputs if type(x) is torch.Tensor]
    found: list[int | None] = []
    for output in outputs:
        mine = _span(output)
        hit = None
        if mine is not None:
            for index, theirs in enumerate(spans):
                if theirs is not None and theirs[0] == mine[0] and theirs[1] < mine[2] and mine[1] < theirs[2]:
                    hit = index
                    break
        found.append(hit)
    return found


def well_formed_aliases(got: Any) -> bool:
    """Whether an aliasing report from the candidate's process has the shape `input_aliases` gives."""
    return type(got) is list and all(a is None or (type(a) is int and a >= 0) for a in got)


def alias_fault(got: list[int | None], allowed: list[int | None]) -> str:
    """'' when every output's aliasing is the reference's at that position, else one sentence for the verdict."""
    for position, index in enumerate(got):
        if index is None:
            continue
        if position < len(allowed) and allowed[position] == index:
            continue
        label = "the output" if len(got) == 1 else f"output {position}"
        return (f"{label} is input {index} itself or a view of its memory, where the reference returns a new tensor; "
                "write the result into a tensor of its own")
    return ""
