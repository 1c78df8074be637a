"""Who computed the outputs, on the CPU path (Triton's interpreter), where no profiler tells.

On the GPU the child profiles one forward and the worker flags a forward whose GPU time lies mostly outside the
candidate's own kernels (`low_kernel_share`). Under `TRITON_INTERPRET=1` there are no GPU kernels to time, so the
child keeps an account of each correctness forward instead:

- **Work.** PyTorch's compute ops outside the candidate's launches are seen by a `TorchDispatchMode` (views,
  allocations, fills and copies are not work); the candidate's launches are seen by the interpreter's memory
  operations (elements loaded and stored, and the multiply-adds of `tl.dot`). Work is counted in elements moved
  plus multiply-adds on both sides, so the share of the forward's work in the candidate's kernels stands in for the
  GPU's share of device time. The account is paused during a launch (the interpreter's own torch calls are not the
  candidate's).
- **Provenance of bytes.** NumPy or plain Python never pass through torch's dispatcher, so the account also knows
  which bytes came from a visible writer: the forward's inputs and the model's and module's tensors as they stood
  when the forward began, stores of the candidate's kernels, and torch ops whose inputs were themselves accounted
  for. Each such byte keeps a shadow copy. Bytes that changed behind the account's back (NumPy writing through
  `np.asarray(t)`), memory torch never allocated (`torch.from_numpy`), and tensors built from Python values
  (`torch.tensor(list)`) are foreign. An output with a foreign element, or a kernel that loads one, did not
  compute the output itself.

The child sends `Account.report()` with each checked forward; the worker sums the reports and judges them with
`judge()`, as it judges the GPU's profile rows (kernels.kernel_share). Worker side only: torch, triton, numpy, stdlib.
"""

from __future__ import annotations

import bisect
import contextlib
import types
from collections.abc import Iterator
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
_ONES = {2: np.uint16(0x0101), 4: np.uint32(0x01010101), 8: np.uint64(0x0101010101010101)}
_VIEW = {1: np.uint8, 2: np.uint16, 4: np.uint32, 8: np.uint64}
MAX_NOTES = 4


class Region:
    """One storage's bytes: a view of its memory, a shadow of what the account last saw there, and which bytes are
    accounted for (`cert`)."""

    def __init__(self, storage: torch.UntypedStorage, certified: bool) -> None:
        self.storage = storage  # kept alive for the forward: its address cannot be reused meanwhile
        self.base = storage.data_ptr()
        self.nbytes = storage.nbytes()
        self.mem = torch.empty(0, dtype=torch.uint8).set_(storage).numpy()
        self.shadow = self.mem.copy() if certified else np.empty_like(self.mem)
        self.cert = np.full(self.nbytes, certified, dtype=np.bool_)

    def audit(self) -> int:
        """Bytes accounted for that no longer hold what the account saw: written behind its back. They stop
        being accounted for; the count is returned."""
        changed = self.cert & (self.mem != self.shadow)
        count = int(np.count_nonzero(changed))
        if count:
            self.cert &= ~changed
        return count

    def element_view(self, array: np.ndarray, t: torch.Tensor, byte: int = 0) -> np.ndarray:
        size = t.element_size()
        offset = t.storage_offset() * size + byte - (t.untyped_storage().data_ptr() - self.base)
        strides = tuple(s * size for s in t.stride())
        return np.lib.stride_tricks.as_strided(array[offset:], shape=tuple(t.shape), strides=strides)

    def uncertified(self, t: torch.Tensor) -> int:
        """Elements of `t` (a tensor on this region) that are not accounted for."""
        return int(np.count_nonzero(~self.element_view(self.cert, t)))

    def certify(self, t: torch.Tensor, certified: bool) -> None:
        """The elements of `t` were just written by a visible writer (`certified`) or by a foreign one."""
        for byte in range(t.element_size()):
            self.element_view(self.cert, t, byte)[...] = certified
        if certified:
            lo, hi = self.span(t)
            np.copyto(self.shadow[lo:hi], self.mem[lo:hi], where=self.cert[lo:hi])

    def span(self, t: torch.Tensor) -> tuple[int, int]:
        size = t.element_size()
        start = t.untyped_storage().data_ptr() - self.base + t.storage_offset() * size
        lo = start + sum(min(0, (n - 1) * s) * size for n, s in zip(t.shape, t.stride()))
        hi = start + sum(max(0, (n - 1) * s) * size for n, s in zip(t.shape, t.stride())) + size
        return max(0, lo), min(self.nbytes, hi)

    def mark(self, offsets: np.ndarray, size: int) -> None:
        """A kernel stored elements of `size` bytes at these byte offsets: accounted for, shadow updated."""
        aligned = size in _ONES and self.nbytes % size == 0 and not np.any(offsets & (size - 1))
        if aligned:
            index = offsets // size
            self.cert.view(_VIEW[size])[index] = _ONES[size]
            self.shadow.view(_VIEW[size])[index] = self.mem.view(_VIEW[size])[index]
            return
        for byte in range(size):
            at = offsets + byte
            self.cert[at] = True
            self.shadow[at] = self.mem[at]


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
        self.notes: list[str] = []
        self.launch: _Launch | None = None
        self.paused = 0
        self.mode_lost = False

    # -- regions ---------------------------------------------------------------------------------
    def region_of(self, storage: torch.UntypedStorage) -> Region | None:
        region = self.regions.get(storage.data_ptr())
        return region if region is not None and region.nbytes == storage.nbytes() else None

    def register(self, storage: torch.UntypedStorage, certified: bool) -> Region | None:
        if storage.device.type != "cpu" or storage.nbytes() == 0 or storage.data_ptr() == 0:
            return None
        region = Region(storage, certified)
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
                self.register(storage, certified=True)

    def locate(self, address: int) -> Region | None:
        i = bisect.bisect_right(self._bases, address) - 1
        if i < 0:
            return None
        region = self.regions[self._bases[i]]
        return region if address < region.base + region.nbytes else None

    def note(self, kind: str, count: int, text: str) -> None:
        self.foreign[kind] = self.foreign.get(kind, 0) + count
        if len(self.notes) < MAX_NOTES and text not in self.notes:
            self.notes.append(text)

    def _audited(self, storage: torch.UntypedStorage) -> Region | None:
        region = self.region_of(storage)
        if region is not None:
            changed = region.audit()
            if changed:
                self.note("changed", changed, f"{changed} bytes changed outside any kernel or torch op (NumPy or Python wrote them)")
        return region

    def _foreign_elements(self, t: torch.Tensor) -> int:
        """Elements of `t` not accounted for (its whole size if torch never allocated its memory)."""
        if t.device.type != "cpu" or t.numel() == 0:
            return 0
        region = self._audited(t.untyped_storage())
        return t.numel() if region is None else region.uncertified(t)

    # -- torch ops -------------------------------------------------------------------------------
    def __torch_dispatch__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if self.paused:
            return func(*args, **kwargs)
        name = func.overloadpacket.__name__
        schema = func._schema
        written = [a.name for a in schema.arguments if a.alias_info is not None and a.alias_info.is_write]
        if name in _METADATA or (not written and any(r.alias_info is not None for r in schema.returns)):
            return func(*args, **kwargs)  # a view or a query: no element read or written
        inputs = _tensors_of(args, kwargs, schema, skip=written if name in _EMPTY | _FILLED | {"copy_"} or
                             func._overloadname.startswith("out") else ())
        reads_elements = name not in _EMPTY | _FILLED | _METADATA | _FROM_PYTHON
        foreign_in = sum(self._foreign_elements(t) for t in inputs) if reads_elements else 0
        out = func(*args, **kwargs)
        outputs = [t for t in _flatten(out) if isinstance(t, torch.Tensor)]
        targets = _tensors_of(args, kwargs, schema, only=written) if written else []
        input_storages = {t.untyped_storage().data_ptr() for t in inputs}
        fresh = [t for t in outputs if t.untyped_storage().data_ptr() not in input_storages]
        if not written and not fresh:
            return out  # a view of an input
        if name not in _EMPTY | _FILLED | _MOVES | _FROM_PYTHON:
            self.torch_work[name] = self.torch_work.get(name, 0) + _work(func, args, inputs, outputs + targets)
        certified = name in _FILLED or (foreign_in == 0 and name not in _EMPTY | _FROM_PYTHON)
        for t, existing in [(t, False) for t in fresh] + [(t, True) for t in targets]:
            if t.device.type != "cpu" or t.numel() == 0:
                continue
            region = self.region_of(t.untyped_storage()) if existing else None
            if region is None:
                region = self.register(t.untyped_storage(), certified=False)
            if region is not None:
                region.certify(t, certified)
        return out

    # -- the candidate's launches ----------------------------------------------------------------
    @contextlib.contextmanager
    def launching(self, name: str, args: tuple, kwargs: dict) -> Iterator[None]:
        """Around one launch: its tensor arguments are audited (bytes changed since the account saw them are
        foreign), unknown memory gets a region (foreign until a store writes it), and torch ops are not counted."""
        self.paused += 1
        try:
            for t in _launch_tensors(list(args) + list(kwargs.values())):
                if t.device.type != "cpu" or t.numel() == 0:
                    continue
                if self._audited(t.untyped_storage()) is None:
                    self.register(t.untyped_storage(), certified=False)
            previous, self.launch = self.launch, _Launch(name)
            try:
                yield
            finally:
                self.launch = previous
        finally:
            self.paused -= 1

    def kernel_memory(self, ptrs: np.ndarray, mask: np.ndarray | None, size: int, load: bool, store: bool) -> None:
        """A memory operation of the running launch: `size`-byte elements at these addresses (where `mask`)."""
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
                    self.note("loaded", int(offsets.size), f"{name} read memory that no tensor of the forward holds")
                continue
            if load:
                unaccounted = int(np.count_nonzero(~region.cert[offsets]))
                if unaccounted:
                    self.note("loaded", unaccounted, f"{name} read {unaccounted} elements that no kernel or torch op "
                              "of the forward wrote (NumPy, Python or uninitialised memory)")
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
        for position, t in enumerate(outputs):
            if not isinstance(t, torch.Tensor):
                continue
            foreign = self._foreign_elements(t)
            if foreign:
                self.note("output", foreign, f"output {position}: {foreign} of its {t.numel()} elements were not "
                          "written by your kernels (or by torch from what they wrote)")

    def report(self) -> dict[str, Any]:
        return {"kernels": dict(self.kernel_work), "torch": dict(self.torch_work), "foreign": dict(self.foreign),
                "notes": list(self.notes), "mode_lost": self.mode_lost}


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
    builder._kbrl_accounted = True
    return True


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
