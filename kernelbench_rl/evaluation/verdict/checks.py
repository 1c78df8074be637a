"""Output and input checks, run in the worker (never in the candidate's process)."""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from typing import Callable
from dataclasses import dataclass

import torch

from kernelbench_rl.evaluation.verdict import fused_compare
from kernelbench_rl.evaluation.result import ErrorCategory

log = logging.getLogger(__name__)
_fused_broken = False  # set once the fused kernel failed to build here; the torch path serves from then on
# Set while the worker builds the fused kernel in the background (defer_fused_comparison): the torch path, which
# judges alike (tests/test_fused_compare.py), serves meanwhile instead of the first
# comparison waiting seconds for Triton.
_fused_deferred = threading.Event()


@dataclass
class CheckOutcome:
    category: ErrorCategory = ErrorCategory.OK
    message: str = ""
    max_abs_err: float | None = None

    @property
    def ok(self) -> bool:
        return self.category == ErrorCategory.OK


def _shape(t: torch.Tensor) -> str:
    return "(" + ", ".join(str(d) for d in t.shape) + ")"


# Where the whole output is as small as the tolerance (KernelBench's L1/23 softmax over 393216 values is
# ~2.5e-6 everywhere, under atol=1e-4), all zeros would pass elementwise. There the error must also stay
# within this share of the output's largest magnitude (an exact kernel is ~1e-6 of it, zeros 100%).
DEGENERATE_SCALE_FACTOR = 10.0
DEGENERATE_RELATIVE_ERROR = 0.01

# "Small against atol" is a relative matter too: KernelBench's L1/23 softmax at a width of 1000 has outputs near 1e-3,
# where atol = 1e-4 lets every element be 10% off, and a softmax with exp(x) replaced by 1 + x + x^2/2 (2-6% off)
# passed. Where an output's largest magnitude is within SMALL_SCALE_FACTOR x atol, its error's root mean square must
# also stay within RELATIVE_RMS_FACTOR x rtol of the reference's root mean square: at a unit scale the elementwise
# check asks about that much (fp32: 1e-3, against 2e-4 elementwise), so the tolerance means the same whatever the
# output's scale. An honest fp32 kernel is ~1e-6 off by that measure.
SMALL_SCALE_FACTOR = 1000.0
RELATIVE_RMS_FACTOR = 10.0

# Outputs are compared in chunks of this many elements, so the temporaries (a float copy, the
# difference, masks) stay around half a GiB even for KernelBench's 6 GiB outputs.
CHUNK_ELEMENTS = 1 << 26


def _compare_floating(ref: torch.Tensor, got: torch.Tensor, atol: float, rtol: float,
                      warming_up: bool = False) -> tuple[int, float, float, str]:
    """(elements outside tolerance, max abs error where the reference is finite, the reference's largest
    finite magnitude, 'NaN'/'Inf' if the candidate is non-finite where the reference is finite, else '').
    fp32/fp16/bf16 CUDA outputs take one fused pass (fused_compare); the rest, and any GPU where that
    kernel cannot build, the torch path."""
    global _fused_broken
    if not _fused_broken and (warming_up or not _fused_deferred.is_set()) and fused_compare.usable(ref, got):
        try:
            figures = fused_compare.compare(ref, got, atol, rtol)
        except (ImportError, RuntimeError) as exc:
            if _cuda_error(exc):
                raise  # the device itself is in error: the torch path would fail the same way
            _fused_broken = True
            log.warning("the fused output comparison is unavailable here (%s); comparing with torch ops", exc)
        else:
            if figures.nonfinite:
                return 0, figures.max_abs_err, figures.scale, "NaN" if figures.nan else "Inf"
            return figures.bad, figures.max_abs_err, figures.scale, ""
    return _compare_floating_torch(ref, got, atol, rtol)


def defer_fused_comparison() -> None:
    """Comparisons take the torch path until `warm_up_comparison` ends (it runs in the background)."""
    _fused_deferred.set()


def warm_up_comparison(device: str | torch.device,
                       launch_gate: Callable[[], contextlib.AbstractContextManager] | None = None) -> str:
    """Build the fused comparison for fp32 (lengths divisible by 16 and not) before any evaluation needs it.

    The worker's Triton cache starts empty (its HOME is private), so otherwise the first candidate of every
    worker pays the JIT, seconds on a busy host, while it holds the device. The compile is host work; only the
    launches that check it take `launch_gate` (the worker's quiet gate: never beside a timed trial). Ends any
    `defer_fused_comparison`. Returns what happened, for the worker's `versions`."""
    t0 = time.perf_counter()
    compiled = ""
    try:
        if torch.device(device).type == "cuda":
            try:
                fused_compare.precompile(device)
                compiled = f", compiled in {time.perf_counter() - t0:.2f} s outside the gate"
            except Exception as exc:  # noqa: BLE001 - the launches below compile, or find it broken
                compiled = f", compiled at launch ({type(exc).__name__})"
        with launch_gate() if launch_gate is not None else contextlib.nullcontext():
            for n in (4096, 4097):
                ref = torch.zeros(n, device=device)
                _compare_floating(ref, ref.clone(), 1e-4, 1e-4, warming_up=True)
            torch.cuda.synchronize(device)
    except Exception as exc:  # noqa: BLE001 - the first evaluation will fall back or fail on its own
        return f"failed: {type(exc).__name__}: {exc}"[:200]
    finally:
        _fused_deferred.clear()
    path = "fused" if torch.device(device).type == "cuda" and not _fused_broken else "torch"
    return f"{path}, {time.perf_counter() - t0:.2f} s{compiled}"


def _cuda_error(exc: BaseException) -> bool:
    text = str(exc)
    return "CUDA error" in text or "CUDA driver error" in text or isinstance(exc, torch.OutOfMemoryError)


def _relative_rms(ref: torch.Tensor, got: torch.Tensor) -> tuple[float, float]:
    """(root mean square of the error, of the reference) over the reference's finite values, chunk by chunk."""
    ref_flat, got_flat = ref.reshape(-1), got.reshape(-1)
    err_sq = ref_sq = 0.0
    count = 0
    chunk = CHUNK_ELEMENTS // 4  # float64 temporaries: about as many bytes as the float comparison's
    for start in range(0, ref_flat.numel(), chunk):
        r, g = ref_flat[start:start + chunk], got_flat[start:start + chunk]
        finite = torch.isfinite(r)
        r64 = torch.where(finite, r.to(torch.float64), 0.0)
        g64 = torch.where(finite, g.to(torch.float64), 0.0)
        err_sq += float(((g64 - r64) ** 2).sum())
        ref_sq += float((r64 ** 2).sum())
        count += int(finite.sum())
    if not count:
        return 0.0, 0.0
    return (err_sq / count) ** 0.5, (ref_sq / count) ** 0.5


def _compare_floating_torch(ref: torch.Tensor, got: torch.Tensor, atol: float,
                            rtol: float) -> tuple[int, float, float, str]:
    """The same figures with torch ops, chunk by chunk."""
    wide = torch.float64 if ref.dtype == torch.float64 else torch.float32
    ref_flat, got_flat = ref.reshape(-1), got.reshape(-1)
    bad, err, scale = 0, 0.0, 0.0
    for start in range(0, ref_flat.numel(), CHUNK_ELEMENTS):
        r, g = ref_flat[start:start + CHUNK_ELEMENTS], got_flat[start:start + CHUNK_ELEMENTS]
        ref_bad, got_bad = ~torch.isfinite(r), ~torch.isfinite(g)
        if bool((got_bad & ~ref_bad).any()):
            return 0, err, scale, "NaN" if bool((torch.isnan(g) & ~ref_bad).any()) else "Inf"
        g64, r64 = g.to(wide), r.to(wide)
        finite = ~ref_bad
        if bool(finite.any()):
            err = max(err, float((g64 - r64).abs()[finite].max()))
            scale = max(scale, float(r64.abs()[finite].max()))
        bad += int((~torch.isclose(g64, r64, rtol=rtol, atol=atol, equal_nan=True)).sum())
    return bad, err, scale, ""


# Index outputs whose reference is one of several right answers (argsort, sort's or topk's indices where values
# tie) are compared exactly unless the problem opts them in, in its source:
#     KBRL_INDEX_OUTPUTS = {1: (0, -1)}   # output 1 indexes input 0 along its last dim
# Such an output is right when its indices are in range, pick no element twice along that dim, and pick the same
# values of that input as the reference's indices do (exactly; NaN matches NaN).
INDEX_OUTPUTS_NAME = "KBRL_INDEX_OUTPUTS"
IndexOutputs = dict[int, tuple[int, int]]


def declared_index_outputs(value: object) -> IndexOutputs:
    """The problem module's KBRL_INDEX_OUTPUTS as {output position: (tensor input position, dim)}; ValueError when
    it is not such a dict."""
    if value is None:
        return {}
    if type(value) is not dict:
        raise ValueError(f"{INDEX_OUTPUTS_NAME} must be a dict {{output: (input, dim)}}")
    found: IndexOutputs = {}
    for output, target in value.items():
        if (type(output) is not int or output < 0 or type(target) not in (tuple, list) or len(target) != 2
                or not all(type(x) is int for x in target) or target[0] < 0):
            raise ValueError(f"{INDEX_OUTPUTS_NAME} entry {output!r}: {target!r} is not output: (input, dim)")
        found[output] = (target[0], target[1])
    return found


def _tie_tolerant_fault(label: str, ref: torch.Tensor, got: torch.Tensor, source: torch.Tensor | None,
                        dim: int) -> str:
    """'' when `got` is a valid choice of indices into `source` along `dim` picking the reference's values."""
    if (source is None or got.dtype not in (torch.int64, torch.int32) or got.dim() != source.dim()
            or not -source.dim() <= dim < source.dim()):
        return f"{label} differs from the reference, and the input it is declared to index has no such dim for it"
    size = source.shape[dim]
    if bool(((got < 0) | (got >= size)).any()):
        return f"{label} holds indices outside [0, {size})"
    ordered = got.sort(dim=dim).values
    if ordered.shape[dim] > 1 and bool((ordered.diff(dim=dim) == 0).any()):
        return f"{label} picks the same element twice along dim {dim}"
    theirs, mine = source.gather(dim, ref.to(torch.int64)), source.gather(dim, got.to(torch.int64))
    same = (theirs == mine) | (torch.isnan(theirs) & torch.isnan(mine)) if theirs.is_floating_point() else theirs == mine
    if not bool(same.all()):
        return (f"{label}'s indices pick other values than the reference's at {int((~same).sum())} of "
                f"{got.numel()} positions")
    return ""


def compare_outputs(reference: list[torch.Tensor], candidate: list[torch.Tensor], atol: float, rtol: float, *,
                    index_outputs: IndexOutputs | None = None,
                    inputs: list[torch.Tensor] | None = None, margin: float = 1.0) -> CheckOutcome:
    """Count, shape, dtype, NaN/Inf and allclose, in that order; max_abs_err over all outputs.

    Floating outputs are judged within (atol, rtol), the degenerate-scale rule and the relative criterion on small
    outputs, each allowance times `margin` (which rules apply is still decided by atol: a margin of 4 asks whether
    two outputs are 4 tolerances apart, sensitivity.py); integer and boolean ones
    (counts, masks, hashes, indices) must be equal, except an index output the problem declared tie-tolerant
    (`index_outputs`, judged against `inputs`, the tensor inputs of this seed). Python scalars arrive as 0-d tensors."""
    if len(candidate) != len(reference):
        return CheckOutcome(ErrorCategory.SHAPE, f"forward returned {len(candidate)} tensor(s), expected {len(reference)}")
    worst = 0.0
    for index, (ref, got) in enumerate(zip(reference, candidate)):
        label = "output" if len(reference) == 1 else f"output {index}"
        if tuple(got.shape) != tuple(ref.shape):
            return CheckOutcome(ErrorCategory.SHAPE, f"{label} has shape {_shape(got)}, expected {_shape(ref)}")
        if got.dtype != ref.dtype:
            return CheckOutcome(
                ErrorCategory.DTYPE,
                f"{label} has dtype {str(got.dtype).removeprefix('torch.')}, expected {str(ref.dtype).removeprefix('torch.')}",
            )
        if got.device != ref.device:
            got = got.to(ref.device)
        if got.numel() == 0:
            continue
        if got.is_floating_point() or got.is_complex():
            if got.is_complex():  # real and imaginary parts each within tolerance (a float cast would drop the latter)
                ref, got = torch.view_as_real(ref.resolve_conj()), torch.view_as_real(got.resolve_conj())
            bad, err, scale, kind = _compare_floating(ref, got, atol * margin, rtol * margin)
            worst = max(worst, err)
            if kind:
                return CheckOutcome(ErrorCategory.MISMATCH, f"{label} contains {kind} where the reference is finite")
            if bad:
                return CheckOutcome(
                    ErrorCategory.MISMATCH,
                    f"{label} differs from the reference at {bad} of {got.numel()} elements "
                    f"(max abs error {err:.3g}, tolerance atol={atol * margin:g} rtol={rtol * margin:g})",
                    max_abs_err=err,
                )
            if 0 < scale <= DEGENERATE_SCALE_FACTOR * atol and err > DEGENERATE_RELATIVE_ERROR * margin * scale:
                return CheckOutcome(
                    ErrorCategory.MISMATCH,
                    f"{label} is off by {err:.3g} where the reference's values are at most {scale:.3g}: within the "
                    f"elementwise tolerance, but {err / scale:.0%} of the output's scale",
                    max_abs_err=err,
                )
            if 0 < scale <= SMALL_SCALE_FACTOR * atol:
                err_rms, ref_rms = _relative_rms(ref, got)
                if ref_rms > 0 and err_rms > RELATIVE_RMS_FACTOR * rtol * margin * ref_rms:
                    return CheckOutcome(
                        ErrorCategory.MISMATCH,
                        f"{label} is off by {err_rms / ref_rms:.2%} of its typical size (root mean square) where its "
                        f"values (at most {scale:.3g}) are small against atol={atol:g}: within the elementwise "
                        f"tolerance, but a relative error over {RELATIVE_RMS_FACTOR * rtol:g} at this scale",
                        max_abs_err=err,
                    )
        elif torch.equal(got, ref):
            continue
        elif index_outputs and index in index_outputs:
            position, dim = index_outputs[index]
            source = inputs[position] if inputs is not None and position < len(inputs) else None
            source = source.to(ref.device) if source is not None else None
            fault = _tie_tolerant_fault(label, ref, got, source, dim)
            if fault:
                return CheckOutcome(ErrorCategory.MISMATCH, fault)
        else:
            bad = int((got != ref).sum())
            kind = "boolean" if ref.dtype == torch.bool else "integer"
            return CheckOutcome(ErrorCategory.MISMATCH, f"{label} differs from the reference at {bad} of {got.numel()} "
                                                        f"elements ({kind} outputs must be equal)")
    return CheckOutcome(ErrorCategory.OK, "", max_abs_err=worst)


def inputs_unmodified(original: list[torch.Tensor], after: list[torch.Tensor]) -> str:
    """'' when every input is bit-identical after the run, else one sentence naming the input."""
    if len(original) != len(after):
        return "the inputs changed in number during forward"
    for index, (before, now) in enumerate(zip(original, after)):
        if tuple(before.shape) != tuple(now.shape) or before.dtype != now.dtype:
            return f"input {index} changed shape or dtype during forward"
        now = now.to(before.device)
        # NaN where NaN was (the masks equal), and every other element bit for bit: nan_to_num alone would read a 0.0
        # written over an input's NaN as unchanged.
        same = torch.equal(before, now) or (
            before.is_floating_point() and bool(torch.isnan(before).any())
            and torch.equal(torch.isnan(before), torch.isnan(now))
            and torch.equal(torch.nan_to_num(before), torch.nan_to_num(now))
        )
        if not same:
            return f"forward modified its input {index} in place; inputs must stay unchanged"
    return ""
