"""Who computed the outputs, on the CPU path (Triton's interpreter), where no profiler tells.

On the GPU the child profiles one forward and the worker flags a forward whose GPU time lies mostly outside the
candidate's own kernels (`low_kernel_share`). Under `TRITON_INTERPRET=1` there are no GPU kernels to time, so the
child keeps an account of each correctness forward instead:

- **Work.** PyTorch's compute ops are seen by a `TorchDispatchMode` around the forward (views, allocations, fills
  and copies are not work); the candidate's launches are seen by the interpreter's memory operations (elements
  loaded and stored, and the multiply-adds of `tl.dot`). Work is counted in elements moved plus multiply-adds on
  both sides, so the share of the forward's work in the candidate's kernels stands in for the GPU's share of device
  time. The account never pauses around the candidate's code: only the interpreter's own steps are exempt (copying
  the arguments to the "host" and back, turning them into pointers, this package's libdevice functions). A torch
  compute op during a launch (in an autotune config's pre_hook, a heuristic, a pre-run hook, the grid function or,
  under the interpreter, the kernel's body, which is Python) is foreign outright.
- **Provenance of bytes.** NumPy, plain Python and native code never pass through torch's dispatcher, so the
  account also keeps, for each byte of the memory the forward touches, whether it is accounted for: the forward's
  inputs and the model's and module's tensors as they stood when the forward began, stores of the candidate's
  kernels, fills, and torch copies of such bytes. Each accounted byte keeps a shadow copy of what it held. What
  PyTorch computed, bytes that changed after they were accounted for (NumPy writing through `np.asarray(t)`),
  memory torch never allocated (`torch.from_numpy`) and tensors built from Python values (`torch.tensor(list)`)
  are not. Every load of a kernel is checked by address, whichever argument its pointer was derived from: an
  element not accounted for, or one that no longer holds what the account last saw there, is foreign; so is an
  output element not accounted for, and a Python number read (`.item()`) from what PyTorch computed or what
  changed. Such a forward did not compute its outputs itself, whatever its share: PyTorch's share of the work is
  judged by whether its bytes reach a kernel or an output, not by the elements it moved (work that reaches neither
  only lowers the share).
- **Launch arguments** must be objects of torch, Triton, NumPy or Python (the interpreter's exempt steps look into
  each of them), tensors rather than NumPy arrays, and no table of numbers: values enter a kernel through memory.

What this cannot see: work done in the kernel's registers by Python under the interpreter (a body that rewrites a
loaded block's NumPy array before storing it; the static policy refuses any code in a `@triton.jit` body that is
not Triton), and numbers computed elsewhere that a kernel receives as a few scalar arguments (a loss computed in
NumPy and stored by a kernel: one float).

The child sends `Account.report()` with each checked forward; the worker sums the reports and judges them with
`judge()`, as it judges the GPU's profile rows (kernels.kernel_share). Worker side only: torch, triton, numpy, stdlib.
"""

from __future__ import annotations

import bisect
import contextlib
import functools
import sys
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch
from torch.utils._python_dispatch import TorchDispatchMode, _get_current_dispatch_mode_stack

# Allocations whose bytes mean nothing until written, and ones whose bytes the op itself decides.
_EMPTY = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted",
                    "resize_", "set_"})
_FILLED = frozenset({"zeros", "zeros_like", "ones", "ones_like", "full", "full_like", "new_zeros", "new_ones",
                     "new_full", "fill_", "zero_", "arange", "linspace", "logspace", "eye", "scalar_tensor",
                     "rand", "rand_like", "randn", "randn_like", "randint", "randint_like", "randperm", "normal_",
                     "uniform_", "random_", "bernoulli_", "tril_indices", "triu_indices"})
# Copies: no work of their own; their outputs are accounted for when what they read is.
_MOVES = frozenset({"copy_", "clone", "_to_copy", "to", "contiguous", "cat", "stack", "_unsafe_view", "view_copy",
                    "expand_copy", "permute_copy", "as_strided_copy", "t_copy", "transpose_copy", "unsqueeze_copy",
                    "squeeze_copy", "alias_copy", "detach_copy", "slice_copy", "select_copy", "narrow_copy",
                    "unbind_copy", "split_copy", "split_with_sizes_copy", "lift_fresh_copy", "_reshape_copy",
                    "reshape", "flatten", "unflatten", "repeat", "expand", "index_select", "split",
                    "split_with_sizes", "unbind", "chunk", "narrow", "_reshape_alias"})
# Tensors made from Python values: what they hold never went through an op the account can see.
_FROM_PYTHON = frozenset({"lift_fresh", "lift"})
# Ops that say something about tensors without reading or writing their elements.
_METADATA = frozenset({"detach", "alias", "view", "_local_scalar_dense", "sym_size", "sym_stride", "sym_numel",
                       "sym_storage_offset", "is_same_size", "_has_compatible_shallow_copy_type", "is_nonzero",
                       "record_stream", "_version", "equal_"})
_ONES = {1: np.uint8(1), 2: np.uint16(0x0101), 4: np.uint32(0x01010101), 8: np.uint64(0x0101010101010101)}
_VIEW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
MAX_NOTES = 4

# What the account knows of each byte of a region (Region.state): ACCOUNTED, or why not.
UNWRITTEN = 0  # allocated and never written by a writer the account sees (or memory first met at a launch)
ACCOUNTED = 1  # as the forward's inputs, a store of the candidate's kernels or a torch copy of such bytes left it
TORCH = 2  # computed by a PyTorch compute op
CHANGED = 3  # changed after the account last saw it, by nothing it sees (NumPy, Python, native code)
PYTHON = 4  # built by torch from Python values (torch.tensor(list))
NOT_TORCH = 5  # memory torch never allocated (torch.from_numpy), or no tensor of the forward holds
_WHY = {
    UNWRITTEN: "that no kernel or torch op of the forward wrote (uninitialised memory)",
    TORCH: "that PyTorch computed",
    CHANGED: "that changed after they were accounted for (NumPy, Python or native code wrote them)",
    PYTHON: "that torch built from Python values",
    NOT_TORCH: "in memory no tensor of the forward holds (NumPy's or another library's)",
}


class Region:
    """One storage's bytes: a view of its memory, a shadow of what the account last saw there, and what it knows of
    each byte (`state`: ACCOUNTED, or why not)."""

    def __init__(self, storage: torch.UntypedStorage, state: int) -> None:
        self.storage = storage  # kept alive for the forward: its address cannot be reused meanwhile
        self.base = storage.data_ptr()
        self.nbytes = storage.nbytes()
        self.mem = torch.empty(0, dtype=torch.uint8).set_(storage).numpy()
        self.shadow = self.mem.copy() if state == ACCOUNTED else np.empty_like(self.mem)
        self.state = np.full(self.nbytes, state, dtype=np.uint8)
        self.ops: set[str] = set()  # the torch compute ops that wrote here

    def audit(self) -> int:
        """Bytes accounted for that no longer hold what the account saw: written behind its back. They stop
        being accounted for; the count is returned."""
        changed = (self.state == ACCOUNTED) & (self.mem != self.shadow)
        count = int(np.count_nonzero(changed))
        if count:
            self.state[changed] = CHANGED
        return count

    def element_view(self, array: np.ndarray, t: torch.Tensor, byte: int = 0) -> np.ndarray:
        size = t.element_size()
        offset = t.storage_offset() * size + byte - (t.untyped_storage().data_ptr() - self.base)
        strides = tuple(s * size for s in t.stride())
        return np.lib.stride_tricks.as_strided(array[offset:], shape=tuple(t.shape), strides=strides)

    def unaccounted(self, t: torch.Tensor) -> np.ndarray:
        """Elements of `t` (a tensor on this region) that are not accounted for, counted by why (index: state)."""
        why = np.array(self.element_view(self.state, t))
        for byte in range(1, t.element_size()):
            other = self.element_view(self.state, t, byte)
            why = np.where(why == ACCOUNTED, other, why)
        return np.bincount(why[why != ACCOUNTED].reshape(-1), minlength=len(_WHY) + 1)

    def set_state(self, t: torch.Tensor, state: int, ops: set[str] | frozenset[str] = frozenset()) -> None:
        """The elements of `t` were just written by a writer the account sees; `state` says what they now are (and
        `ops`, the torch compute ops behind them, if PyTorch's)."""
        for byte in range(t.element_size()):
            self.element_view(self.state, t, byte)[...] = state
        if state == ACCOUNTED:
            lo, hi = self.span(t)
            np.copyto(self.shadow[lo:hi], self.mem[lo:hi], where=self.state[lo:hi] == ACCOUNTED)
        elif state == TORCH:
            self.ops |= ops

    def span(self, t: torch.Tensor) -> tuple[int, int]:
        size = t.element_size()
        start = t.untyped_storage().data_ptr() - self.base + t.storage_offset() * size
        lo = start + sum(min(0, (n - 1) * s) * size for n, s in zip(t.shape, t.stride()))
        hi = start + sum(max(0, (n - 1) * s) * size for n, s in zip(t.shape, t.stride())) + size
        return max(0, lo), min(self.nbytes, hi)

    def _aligned(self, offsets: np.ndarray, size: int) -> bool:
        return size in _ONES and self.nbytes % size == 0 and not np.any(offsets & (size - 1))

    def mark(self, offsets: np.ndarray, size: int) -> None:
        """A kernel stored elements of `size` bytes at these byte offsets: accounted for, shadow updated."""
        if self._aligned(offsets, size):
            index = offsets // size
            self.state.view(_VIEW[size])[index] = _ONES[size]
            self.shadow.view(_VIEW[size])[index] = self.mem.view(_VIEW[size])[index]
            return
        for byte in range(size):
            at = offsets + byte
            self.state[at] = ACCOUNTED
            self.shadow[at] = self.mem[at]

    def check_load(self, offsets: np.ndarray, size: int) -> np.ndarray:
        """A kernel loads elements of `size` bytes at these byte offsets: those not accounted for, counted by why
        (index: state). An element accounted for but holding other bytes than the account last saw there changed
        behind its back: it is CHANGED from now on, however the kernel reached it."""
        if self._aligned(offsets, size):
            view = _VIEW[size]
            index = offsets // size
            states = self.state.view(view)[index]
            foreign = states != _ONES[size]
            changed = ~foreign & (self.mem.view(view)[index] != self.shadow.view(view)[index])
            why = np.full(states.shape, ACCOUNTED, dtype=np.uint8)
            for byte in range(size):  # the first byte not accounted for says why
                why = np.where(why == ACCOUNTED, ((states >> view(8 * byte)) & view(0xFF)).astype(np.uint8), why)
        else:
            foreign = np.zeros(offsets.shape, dtype=np.bool_)
            changed = np.zeros(offsets.shape, dtype=np.bool_)
            why = self.state[offsets].copy()
            for byte in range(size):
                at = offsets + byte
                foreign |= self.state[at] != ACCOUNTED
                why = np.where(why == ACCOUNTED, self.state[at], why)
            for byte in range(size):
                at = offsets + byte
                changed |= ~foreign & (self.mem[at] != self.shadow[at])
        counts = np.bincount(why[foreign], minlength=len(_WHY) + 1)
        if changed.any():
            counts[CHANGED] += int(np.count_nonzero(changed))
            for byte in range(size):
                self.state[offsets[changed] + byte] = CHANGED
        return counts


@dataclass
class _Launch:
    name: str


class Account(TorchDispatchMode):
    """The account of one forward (see the module's docstring). Active as a dispatch mode around the forward;
    the interpreter's hooks report the launches to it."""

    def __init__(self) -> None:
        super().__init__()
        self.regions: dict[int, Region] = {}
        self._bases: list[int] = []
        self.kernel_work: dict[str, int] = {}
        self.torch_work: dict[str, int] = {}
        self.foreign: dict[str, int] = {}
        self.notes: dict[str, int] = {}  # the first MAX_NOTES findings, each with its count
        self.launch: _Launch | None = None
        self.launching_code: list[str] = []  # inside an autotuner's or a heuristic's run: the kernel being launched
        self.paused = 0
        self.mode_lost = False

    # -- regions ---------------------------------------------------------------------------------
    def region_of(self, storage: torch.UntypedStorage) -> Region | None:
        region = self.regions.get(storage.data_ptr())
        return region if region is not None and region.nbytes == storage.nbytes() else None

    def register(self, storage: torch.UntypedStorage, state: int) -> Region | None:
        if storage.device.type != "cpu" or storage.nbytes() == 0 or storage.data_ptr() == 0:
            return None
        region = Region(storage, state)
        first = bisect.bisect_right(self._bases, region.base) - 1
        last = bisect.bisect_left(self._bases, region.base + region.nbytes)
        for base in self._bases[max(first, 0):last]:
            if region.base < base + self.regions[base].nbytes:
                del self.regions[base]  # a storage freed since: its address now holds this one
                self._bases.remove(base)
        self.regions[region.base] = region
        bisect.insort(self._bases, region.base)
        return region

    def trust(self, tensors: Iterator[torch.Tensor]) -> None:
        """Tensors whose bytes stand as they are: the forward's inputs, the model's and the module's tensors."""
        for t in tensors:
            storage = t.untyped_storage()
            if self.region_of(storage) is None:
                self.register(storage, ACCOUNTED)

    def locate(self, address: int) -> Region | None:
        i = bisect.bisect_right(self._bases, address) - 1
        if i < 0:
            return None
        region = self.regions[self._bases[i]]
        return region if address < region.base + region.nbytes else None

    def note(self, kind: str, count: int, text: str) -> None:
        self.foreign[kind] = self.foreign.get(kind, 0) + count
        if text in self.notes or len(self.notes) < MAX_NOTES:
            self.notes[text] = self.notes.get(text, 0) + count

    def note_unaccounted(self, kind: str, counts: np.ndarray, what: str, region: Region | None) -> None:
        """Note elements not accounted for, by why (`counts` indexed by state); `what` begins each note."""
        for state in np.nonzero(counts)[0]:
            count = int(counts[state])
            why = _WHY.get(int(state), "not accounted for")
            if int(state) == TORCH and region is not None and region.ops:
                why += f" ({', '.join(sorted(region.ops)[:3])})"
            self.note(kind, count, f"{what} elements {why}")

    def _audited(self, storage: torch.UntypedStorage) -> Region | None:
        region = self.region_of(storage)
        if region is not None:
            changed = region.audit()
            if changed:
                self.note("changed", changed, "bytes changed outside any kernel or torch op (NumPy, Python or "
                          "native code wrote them)")
        return region

    def _unaccounted(self, t: torch.Tensor) -> tuple[np.ndarray, Region | None]:
        """Elements of `t` not accounted for, by why (all of them if torch never allocated its memory)."""
        if t.device.type != "cpu" or t.numel() == 0:
            return np.zeros(len(_WHY) + 1, dtype=np.int64), None
        region = self._audited(t.untyped_storage())
        if region is None:
            counts = np.zeros(len(_WHY) + 1, dtype=np.int64)
            counts[NOT_TORCH] = t.numel()
            return counts, None
        return region.unaccounted(t), region

    @contextlib.contextmanager
    def exempt(self) -> Iterator[None]:
        """The interpreter's own steps (and the account's): their torch ops are neither work nor writers."""
        self.paused += 1
        try:
            yield
        finally:
            self.paused -= 1

    # -- torch ops -------------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        name = func.overloadpacket.__name__
        schema = func._schema
        written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        if name == "_local_scalar_dense" and args and isinstance(args[0], torch.Tensor):
            # A Python number read out of a tensor (`.item()`) that PyTorch computed, or that changed behind the
            # account's back: such work can reach a kernel as an argument. (Python's own values coming back, or
            # memory never written, carry no work.)
            counts, region = self._unaccounted(args[0])
            counts[[UNWRITTEN, PYTHON]] = 0
            self.note_unaccounted("scalar", counts, "a Python number (.item()) was read from", region)
        if name in _METADATA or (not written and any(r.alias_info is not None for r in schema.returns)):
            return func(*args, **kwargs)  # a view or a query: no element read or written
        # What an op only writes is no input of it: the whole target of a fill or a copy, an `out=` argument.
        skip = written if name in _EMPTY | _FILLED | {"copy_"} else [
            a.name for a in schema.arguments if a.name in written and a.kwarg_only]
        inputs = _tensors_of(args, kwargs, schema, skip=skip)
        reads_elements = name not in _EMPTY | _FILLED | _METADATA | _FROM_PYTHON
        read = [self._unaccounted(t) for t in inputs] if reads_elements else []
        why_in = sum((counts for counts, _region in read), np.zeros(len(_WHY) + 1, dtype=np.int64))
        foreign_in = int(why_in.sum())
        out = func(*args, **kwargs)
        outputs = [t for t in _flatten(out) if isinstance(t, torch.Tensor)]
        targets = _tensors_of(args, kwargs, schema, only=written) if written else []
        input_storages = {t.untyped_storage().data_ptr() for t in inputs}
        fresh = [t for t in outputs if t.untyped_storage().data_ptr() not in input_storages]
        if not written and not fresh:
            return out  # a view of an input
        computes = name not in _EMPTY | _FILLED | _MOVES | _FROM_PYTHON
        if computes:
            work = _work(func, args, inputs, outputs + targets)
            self.torch_work[name] = self.torch_work.get(name, 0) + work
            kernel = self.launch.name if self.launch is not None else (self.launching_code or [None])[-1]
            if kernel is not None:
                # Inside a launch nothing but the interpreter's own steps (exempt) runs torch: this is the
                # candidate's hook, heuristic, grid function or kernel body computing in PyTorch.
                self.note("in_launch", max(1, work), f"PyTorch's {name} ran during the launch of {kernel} "
                          "(in a hook, a heuristic, the grid function or the kernel's body)")
        if name in _FILLED:
            state = ACCOUNTED
        elif name in _EMPTY:
            state = UNWRITTEN
        elif name in _FROM_PYTHON:
            state = PYTHON
        elif computes:
            state = TORCH  # PyTorch's work: foreign wherever a kernel loads it or an output holds it
        else:  # a copy: what it read, and why that was not accounted for (the commonest reason)
            state = ACCOUNTED if foreign_in == 0 else int(np.argmax(why_in))
        ops = {name} if state == TORCH and computes else {op for _c, r in read if r is not None for op in r.ops}
        for t, existing in [(t, False) for t in fresh] + [(t, True) for t in targets]:
            if t.device.type != "cpu" or t.numel() == 0:
                continue
            region = self.region_of(t.untyped_storage()) if existing else None
            if region is None:
                region = self.register(t.untyped_storage(), UNWRITTEN)
            if region is not None:
                region.set_state(t, state, ops)
        return out

    # -- the candidate's launches ----------------------------------------------------------------
    @contextlib.contextmanager
    def launching(self, name: str, args: tuple, kwargs: dict) -> Iterator[None]:
        """Around one launch: its tensor arguments are audited (bytes changed since the account saw them are
        foreign), unknown memory gets a region (foreign until a store writes it), and what the launch runs is
        attributed to it. Nothing is paused here: only the interpreter's own steps are (`exempt`); the candidate's
        hooks, heuristics, grid function and kernel body run under the account like the rest of the forward."""
        with self.exempt():
            values = list(args) + [v for k, v in kwargs.items() if k not in ("grid", "warmup")]
            odd = _odd_argument(values)
            if odd:
                self.note("argument", 1, f"{name} was launched with {odd}")
            for t in _launch_tensors(values):
                if t.device.type != "cpu" or t.numel() == 0:
                    continue
                if self._audited(t.untyped_storage()) is None:
                    self.register(t.untyped_storage(), UNWRITTEN)
        previous, self.launch = self.launch, _Launch(name)
        try:
            yield
        finally:
            self.launch = previous

    def kernel_memory(self, ptrs: np.ndarray, mask: np.ndarray | None, size: int, load: bool, store: bool) -> None:
        """A memory operation of the running launch: `size`-byte elements at these addresses (where `mask`).
        Loads are checked by address, whichever argument the pointer came from: every byte must be accounted for
        and still hold what the account last saw there."""
        if self.launch is None:
            return  # not inside a launch: nothing is credited, and nothing it wrote is accounted for
        addresses = ptrs.reshape(-1)
        if mask is not None:
            addresses = addresses[np.broadcast_to(mask, ptrs.shape).reshape(-1)]
        count = int(addresses.size)
        if count == 0:
            return
        name = self.launch.name
        self.kernel_work[name] = self.kernel_work.get(name, 0) + count * (int(load) + int(store))
        addresses = addresses.astype(np.int64, copy=False)
        low, high = int(addresses.min()), int(addresses.max())
        region = self.locate(low)
        if region is not None and high + size <= region.base + region.nbytes:
            groups = [(region, addresses - region.base)]
        else:
            groups = self._split(addresses, size)
        for region, offsets in groups:
            if region is None:
                if load:
                    self.note("loaded", int(offsets.size), f"{name} read elements {_WHY[NOT_TORCH]}")
                continue
            if load:
                self.note_unaccounted("loaded", region.check_load(offsets, size), f"{name} read", region)
            if store:
                region.mark(offsets, size)

    def _split(self, addresses: np.ndarray, size: int) -> list[tuple[Region | None, np.ndarray]]:
        bases = np.asarray(self._bases, dtype=np.int64)
        index = np.searchsorted(bases, addresses, side="right") - 1
        groups: list[tuple[Region | None, np.ndarray]] = []
        outside = index < 0
        for i in np.unique(index[~outside]):
            region = self.regions[self._bases[int(i)]]
            chosen = addresses[index == i]
            inside = chosen + size <= region.base + region.nbytes
            groups.append((region, chosen[inside] - region.base))
            if not inside.all():
                groups.append((None, chosen[~inside]))
        if outside.any():
            groups.append((None, addresses[outside]))
        return groups

    def dot(self, m: int, n: int, k: int) -> None:
        if self.launch is not None:
            self.kernel_work[self.launch.name] = self.kernel_work.get(self.launch.name, 0) + m * n * k

    # -- the forward's end -----------------------------------------------------------------------
    def outputs_done(self, outputs: list[Any]) -> None:
        self.mode_lost = not still_active(self)
        with self.exempt():
            for position, t in enumerate(outputs):
                if not isinstance(t, torch.Tensor):
                    continue
                counts, region = self._unaccounted(t)
                self.note_unaccounted("output", counts, f"output {position} ({t.numel()} elements) holds", region)

    def report(self) -> dict[str, Any]:
        return {"kernels": dict(self.kernel_work), "torch": dict(self.torch_work), "foreign": dict(self.foreign),
                "notes": [f"{text} ({count})" for text, count in self.notes.items()], "mode_lost": self.mode_lost}


# -- the interpreter's hooks ---------------------------------------------------------------------
_ACTIVE: list[Account | None] = [None]


def active() -> Account | None:
    return _ACTIVE[0]


def install_interpreter_hooks() -> bool:
    """Report the interpreter's memory operations and dots to the active account (once per process)."""
    try:
        from triton.runtime import interpreter as tri
    except ImportError:
        return False
    builder = tri.InterpreterBuilder
    if getattr(builder, "_kbrl_accounted", False):
        return True
    load, store = builder.create_masked_load, builder.create_masked_store
    rmw, cas, dot = builder.create_atomic_rmw, builder.create_atomic_cas, builder.create_dot

    def itemsize(ptrs: Any) -> int:
        return int(tri._get_np_dtype(ptrs.get_element_ty()).itemsize)

    def masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        account = _ACTIVE[0]
        if account is not None:
            account.kernel_memory(ptrs.data, mask.data, itemsize(ptrs), load=True, store=False)
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    def masked_store(self, ptrs, value, mask, cache_policy):
        result = store(self, ptrs, value, mask, cache_policy)
        account = _ACTIVE[0]
        if account is not None:
            account.kernel_memory(ptrs.data, mask.data, itemsize(ptrs), load=False, store=True)
        return result

    def atomic_rmw(self, rmwOp, ptr, val, mask, sem, scope):  # noqa: N803 - the interpreter's names
        account = _ACTIVE[0]
        if account is not None:
            account.kernel_memory(ptr.data, mask.data, itemsize(ptr), load=True, store=False)
        result = rmw(self, rmwOp, ptr, val, mask, sem, scope)
        if account is not None:
            account.kernel_memory(ptr.data, mask.data, itemsize(ptr), load=False, store=True)
        return result

    def atomic_cas(self, ptr, cmp, val, sem, scope):
        account = _ACTIVE[0]
        if account is not None:
            account.kernel_memory(ptr.data, None, itemsize(ptr), load=True, store=False)
        result = cas(self, ptr, cmp, val, sem, scope)
        if account is not None:
            account.kernel_memory(ptr.data, None, itemsize(ptr), load=False, store=True)
        return result

    def counted_dot(self, a, b, d, input_precision, max_num_imprecise_acc):
        account = _ACTIVE[0]
        if account is not None and a.data.ndim >= 2 and b.data.ndim >= 2:
            account.dot(int(np.prod(a.data.shape[:-1])), int(b.data.shape[-1]), int(a.data.shape[-1]))
        return dot(self, a, b, d, input_precision, max_num_imprecise_acc)

    builder.create_masked_load, builder.create_masked_store = masked_load, masked_store
    builder.create_atomic_rmw, builder.create_atomic_cas, builder.create_dot = atomic_rmw, atomic_cas, counted_dot
    # The interpreter's own steps around the candidate's code, and only those, run exempt: copying the arguments'
    # storages "to the host" and back (a `set_` and a `copy_` of each storage onto itself on the CPU) and turning
    # them into pointers. The pre-run hooks, the grid function and the kernel's body run between them, accounted.
    try:
        from triton.runtime.autotuner import Autotuner, Heuristics
    except ImportError:
        Autotuner = Heuristics = None  # noqa: N806
    for wrapper in (Autotuner, Heuristics):  # their pre_hooks and heuristics run before the launch: part of it
        if wrapper is not None:
            wrapper.run = _launching_code(wrapper.run)
    executor = tri.GridExecutor
    executor._init_args_hst = exempt(executor._init_args_hst)
    executor._restore_args_dev = exempt(executor._restore_args_dev)
    tri._implicit_cvt = exempt(tri._implicit_cvt)
    builder._kbrl_accounted = True
    return True


def _launching_code(run: Callable[..., Any]) -> Callable[..., Any]:
    """An autotuner's or a heuristic's `run`: the candidate's pre_hooks and heuristics it calls belong to the launch
    (a torch compute op there is foreign, as in a pre-run hook or the grid function)."""

    @functools.wraps(run)
    def launching(self: Any, *args: Any, **kwargs: Any) -> Any:
        account = _ACTIVE[0]
        if account is None:
            return run(self, *args, **kwargs)
        fn = getattr(self, "base_fn", None) or getattr(self, "fn", None)
        account.launching_code.append(str(getattr(fn, "__name__", "?")))
        try:
            return run(self, *args, **kwargs)
        finally:
            account.launching_code.pop()

    return launching


def exempt(fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` as one of the interpreter's own steps: its torch ops are not the candidate's (see Account.exempt). Only
    for code of the interpreter or of this package that runs no code of the candidate's (the launch's arguments
    are checked to be library objects first: `_odd_argument`)."""

    @functools.wraps(fn)
    def run(*args: Any, **kwargs: Any) -> Any:
        account = _ACTIVE[0]
        if account is None:
            return fn(*args, **kwargs)
        with account.exempt():
            return fn(*args, **kwargs)

    return run


def launch(name: str, args: tuple, kwargs: dict) -> contextlib.AbstractContextManager:
    """Around one of the candidate's launches (the child's launch counter calls this)."""
    account = _ACTIVE[0]
    return account.launching(name, args, kwargs) if account is not None else contextlib.nullcontext()


@contextlib.contextmanager
def forward(model: Any, inputs: list[Any], module: Any = None) -> Iterator[Account]:
    """Keep an account of one forward. What exists when it begins (inputs, the model's tensors, tensors held at the
    candidate module's top level) is trusted as it stands; call `outputs_done` with the outputs before leaving."""
    account = Account()
    account.trust(_held_tensors([inputs, model, vars(module) if module is not None else {}]))
    _ACTIVE[0] = account
    try:
        with account:
            yield account
    finally:
        _ACTIVE[0] = None


def warm() -> None:
    """Pay the first use's cost (about a second of torch's lazy Python-dispatch machinery on a 2-core CPU) now: the
    zygote calls this (startup.ZYGOTE_PRELOAD), so every child forked from it starts warm and no candidate's first
    correctness call carries it (a ReLU under a 1 s timeout timed out on it). CPU tensors only: the zygote must never
    start CUDA."""
    model, inputs = torch.nn.ReLU(), [torch.rand(4, 8)]
    with torch.no_grad(), forward(model, inputs) as account:
        account.outputs_done([torch.relu(inputs[0]) + inputs[0]])
    account.report()


def still_active(account: Account) -> bool:
    """Whether the account was still on torch's dispatch-mode stack (a forward that pops it hid its torch ops)."""
    return any(mode is account for mode in _get_current_dispatch_mode_stack())


# -- helpers ---------------------------------------------------------------------------------------
def _flatten(value: Any) -> Iterator[Any]:
    if isinstance(value, (list, tuple)):
        for item in value:
            yield from _flatten(item)
    else:
        yield value


def _tensors_of(args: tuple, kwargs: dict, schema: Any, skip: Any = (), only: Any = None) -> list[torch.Tensor]:
    named: list[tuple[str, Any]] = []
    for position, value in enumerate(args):
        argument = schema.arguments[position] if position < len(schema.arguments) else None
        named.append((argument.name if argument is not None else "", value))
    named.extend(kwargs.items())
    found = []
    for name, value in named:
        if name in skip or (only is not None and name not in only):
            continue
        found.extend(t for t in _flatten(value) if isinstance(t, torch.Tensor))
    return found


def _launch_tensors(values: list[Any]) -> Iterator[torch.Tensor]:
    for value in values:
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, (list, tuple)):
            yield from _launch_tensors(list(value))
        elif isinstance(getattr(value, "base", None), torch.Tensor):  # TensorWrapper, TensorDescriptor
            yield value.base


# Launch arguments: library objects only (the interpreter's exempt steps look into each of them: `hasattr`,
# `data_ptr()`, comparisons of integers), and values enter a kernel through memory, not as a table of numbers.
_PLAIN = (type(None), bool, int, float, str, bytes, complex)
_LIBRARIES = ("torch", "triton", "numpy", "builtins")
MAX_ARGUMENT_NUMBERS = 128


def _library_type(kind: type) -> bool:
    """Whether `kind` is the class a module of torch, Triton, NumPy or Python's builtins names (a class of the
    candidate's, whatever `__module__` or metaclass it claims, is not)."""
    meta = type(kind)
    if meta is not type and not _library_type(meta):
        return False
    module_name = type.__getattribute__(kind, "__module__")
    qualname = type.__getattribute__(kind, "__qualname__")
    if not isinstance(module_name, str) or not isinstance(qualname, str) or module_name.split(".")[0] not in _LIBRARIES:
        return False
    found: Any = sys.modules.get(module_name)
    for part in qualname.split("."):
        found = vars(found).get(part) if isinstance(found, (types.ModuleType, type)) else None
    return found is kind


def _odd_argument(values: list[Any]) -> str:
    """'' when a launch's arguments are library objects carrying few numbers, else what is odd about them."""
    numbers = 0
    stack = list(values)
    while stack:
        value = stack.pop()
        kind = type(value)
        if kind in _PLAIN:
            numbers += kind in (bool, int, float, complex)
            continue
        if kind in (tuple, list):
            stack.extend(value)
            continue
        if not _library_type(kind):
            return (f"an object of class {str(type.__getattribute__(kind, '__qualname__'))[:60]} as an argument (not one "
                    "of torch's, Triton's or NumPy's)")
        if isinstance(value, np.ndarray):
            return "a NumPy array as an argument (a kernel reads its inputs through pointers)"
        if kind.__name__ in ("constexpr", "TensorWrapper", "TensorDescriptor"):
            stack.extend(vars(value).values())  # what the interpreter reads of them: value, base, shape, strides
        elif isinstance(value, tuple):  # torch.Size
            numbers += len(value)
    if numbers > MAX_ARGUMENT_NUMBERS:
        return f"{numbers} numbers as arguments (values enter a kernel through memory)"
    return ""


def _held_tensors(roots: list[Any], limit: int = 100_000) -> Iterator[torch.Tensor]:
    """Tensors reachable from these objects through containers, module attributes and nn.Module state."""
    seen: set[int] = set()
    stack = list(roots)
    while stack and len(seen) < limit:
        value = stack.pop()
        if id(value) in seen:
            continue
        seen.add(id(value))
        if isinstance(value, torch.Tensor):
            yield value
        elif isinstance(value, dict):
            stack.extend(value.values())
        elif isinstance(value, (list, tuple, set, frozenset)):
            stack.extend(value)
        elif isinstance(value, torch.nn.Module):
            stack.extend(vars(value).values())
        elif (hasattr(value, "__dict__") and not isinstance(value, (type, types.ModuleType))
              and not callable(value)):
            stack.extend(vars(value).values())


def _work(func: Any, args: tuple, inputs: list[torch.Tensor], outputs: list[torch.Tensor]) -> int:
    """A torch op's work: elements read and written, or its multiply-adds where it contracts (matmul, conv,
    attention). (torch.utils.flop_counter knows more ops, but importing it costs a child seconds.)"""
    moved = sum(t.numel() for t in inputs) + sum(t.numel() for t in outputs)
    name = func.overloadpacket.__name__
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    macs = 0
    try:
        if name in ("mm", "bmm", "addmm", "baddbmm", "addbmm", "addmv", "mv", "dot", "vdot") and len(tensors) >= 2:
            a, b = tensors[-2], tensors[-1]
            macs = a.numel() * (b.shape[-1] if b.dim() >= 2 else 1)
        elif "convolution" in name and len(tensors) >= 2:
            x, w = tensors[0], tensors[1]
            transposed = any(a is True for a in args[6:7])
            per_output = w.numel() // max(1, w.shape[0])
            macs = (x.numel() if transposed else (outputs[0].numel() if outputs else 0)) * per_output
        elif "attention" in name and len(tensors) >= 3:
            q, k = tensors[0], tensors[1]
            macs = 2 * q.numel() * k.shape[-2]
    except (IndexError, RuntimeError):
        macs = 0
    return max(moved, int(macs))


# -- the worker's judgement ----------------------------------------------------------------------
@dataclass
class Verdict:
    share: float  # the candidate's kernels' share of the forward's work
    foreign: int  # elements of outputs (or loads) that came from no visible writer
    summary: str


def judge(reports: list[dict[str, Any]], own_names: set[str]) -> Verdict | None:
    """The verdict over every checked forward's report (None when no report came: the account did not run)."""
    from kernelbench_rl.evaluation.source.kernels import is_own_kernel

    reports = [r for r in reports if isinstance(r, dict)]
    if not reports:
        return None
    own = other = torch_work = foreign = 0
    ops: dict[str, int] = {}
    notes: list[str] = []
    for report in reports:
        for name, work in (report.get("kernels") or {}).items():
            if is_own_kernel(str(name), own_names):
                own += int(work)
            else:
                other += int(work)
        for name, work in (report.get("torch") or {}).items():
            torch_work += int(work)
            ops[str(name)] = ops.get(str(name), 0) + int(work)
        foreign += sum(int(v) for v in (report.get("foreign") or {}).values())
        notes += [str(n) for n in report.get("notes") or [] if str(n) not in notes]
        if report.get("mode_lost"):
            foreign += 1
            notes.append("the forward left the compute account's dispatch mode")
    total = own + other + torch_work
    share = own / total if total else 0.0
    top = ", ".join(f"{name} {work}" for name, work in sorted(ops.items(), key=lambda kv: -kv[1])[:3])
    summary = f"CPU work share of own kernels {share:.3f} (own {own}, torch {torch_work}{': ' + top if top else ''})"
    if foreign:
        summary += f"; foreign: {'; '.join(notes[:MAX_NOTES])}"
    return Verdict(share, foreign, summary[:600])


def flag_result(result: Any, reports: list[Any], own_names: set[str], low_share: float, token_share: float) -> None:
    """The GPU's verdict from the CPU's account: `low_kernel_share` below `low_share` of the work in the candidate's
    own kernels, and `hack` as well below `token_share` or wherever foreign bytes reached the outputs or a kernel."""
    from kernelbench_rl.evaluation.result import Flag

    verdict = judge(reports, own_names)
    if verdict is None:
        return
    result.kernel_share = verdict.share
    result.versions["compute_account"] = verdict.summary
    flags = []
    if verdict.foreign or verdict.share < low_share:
        flags.append(Flag.LOW_KERNEL_SHARE.value)
    if verdict.foreign or verdict.share < token_share:
        flags.append(Flag.HACK.value)
    result.flags += [flag for flag in flags if flag not in result.flags]
