"""Triton's CPU interpreter (TRITON_INTERPRET=1): making it run what honest kernels use, and naming what it
cannot run, so that a limit of the interpreter is never the kernel's fault.

- `@triton.autotune` with several configs benchmarks them through the GPU driver ("0 active drivers"):
  under the interpreter the first config is taken without benchmarking (every config must be right anyway;
  the GPU judges speed).
- `triton.language.extra.libdevice` holds stubs that the GPU compiler maps to CUDA's libdevice; the
  interpreter runs them as Python and gets None. The common math functions get implementations on the
  interpreter's numpy arrays (through torch's CPU ops); the rest raise `Unsupported`.

`unsupported_reason` tells a failure of the interpreter from the kernel's own. Installed in the sandboxed
child before the candidate is imported. Worker side only (torch, triton, numpy, stdlib).
"""

from __future__ import annotations

import math
import traceback
from collections.abc import Callable
from typing import Any

import numpy as np
import torch

from kernelbench_rl.evaluation.sandbox import compute_account

PREFIX = "the CPU interpreter cannot run this kernel: "
_INTERPRETER_FILE = "triton/runtime/interpreter.py"
_DRIVER_FILE = "triton/runtime/driver.py"


class Unsupported(Exception):
    """What the kernel uses has no implementation under the interpreter."""


def _round_half_away(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.floor(torch.abs(x) + 0.5)


def _cbrt(x: torch.Tensor) -> torch.Tensor:
    return torch.sign(x) * torch.abs(x).pow(1.0 / 3.0)


_UNARY: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "abs": torch.abs, "floor": torch.floor, "ceil": torch.ceil, "trunc": torch.trunc, "rint": torch.round,
    "nearbyint": torch.round, "round": _round_half_away, "sqrt": torch.sqrt, "rsqrt": torch.rsqrt, "cbrt": _cbrt,
    "rcbrt": lambda x: 1.0 / _cbrt(x), "exp": torch.exp, "exp2": torch.exp2, "exp10": lambda x: torch.pow(10.0, x),
    "expm1": torch.expm1, "log": torch.log, "log2": torch.log2, "log10": torch.log10, "log1p": torch.log1p,
    "sin": torch.sin, "cos": torch.cos, "tan": torch.tan, "asin": torch.asin, "acos": torch.acos, "atan": torch.atan,
    "sinh": torch.sinh, "cosh": torch.cosh, "tanh": torch.tanh, "asinh": torch.asinh, "acosh": torch.acosh,
    "atanh": torch.atanh, "sinpi": lambda x: torch.sin(math.pi * x), "cospi": lambda x: torch.cos(math.pi * x),
    "erf": torch.erf, "erfc": torch.erfc, "erfinv": torch.erfinv, "erfcinv": lambda x: torch.erfinv(1.0 - x),
    "erfcx": torch.special.erfcx, "normcdf": torch.special.ndtr, "normcdfinv": torch.special.ndtri,
    "lgamma": torch.lgamma, "tgamma": lambda x: torch.special.gamma(x) if hasattr(torch.special, "gamma")
    else torch.exp(torch.lgamma(x)), "j0": torch.special.bessel_j0, "j1": torch.special.bessel_j1,
    "y0": torch.special.bessel_y0, "y1": torch.special.bessel_y1, "cyl_bessel_i0": torch.special.i0,
    "cyl_bessel_i1": torch.special.i1, "saturatef": lambda x: torch.clamp(x, 0.0, 1.0),
    "fast_sinf": torch.sin, "fast_cosf": torch.cos, "fast_tanf": torch.tan, "fast_tanhf": torch.tanh,
    "fast_expf": torch.exp, "fast_exp10f": lambda x: torch.pow(10.0, x), "fast_logf": torch.log,
    "fast_log2f": torch.log2, "fast_log10f": torch.log10,
}
_UNARY.update({f"{name}_{mode}": fn for name, fn in (("sqrt", torch.sqrt), ("rcp", torch.reciprocal),
                                                     ("rsqrt", torch.rsqrt)) for mode in ("rn", "rz", "rd", "ru")})
_BINARY: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "pow": torch.pow, "fast_powf": torch.pow, "atan2": torch.atan2, "hypot": torch.hypot,
    "copysign": torch.copysign, "fmod": torch.fmod, "nextafter": torch.nextafter, "fast_dividef": torch.div,
    "fdim": lambda x, y: torch.clamp_min(x - y, 0.0), "ldexp": lambda x, y: x * torch.pow(2.0, y),
    "scalbn": lambda x, y: x * torch.pow(2.0, y), "remainder": lambda x, y: x - torch.round(x / y) * y,
    "rhypot": lambda x, y: 1.0 / torch.hypot(x, y),
}
for _op, _fn in (("div", torch.div), ("add", torch.add), ("sub", torch.sub), ("mul", torch.mul)):
    _BINARY.update({f"{_op}_{mode}": _fn for mode in ("rn", "rz", "rd", "ru")})
_TERNARY: dict[str, Callable[..., torch.Tensor]] = {
    "fma": lambda x, y, z: x * y + z, **{f"fma_{mode}": (lambda x, y, z: x * y + z) for mode in ("rn", "rz", "rd", "ru")},
}
_LIBDEVICE_MODULES = ("triton.language.extra.libdevice", "triton.language.extra.cuda.libdevice")


_SCALARS = (bool, int, float, np.bool_, np.int32, np.int64, np.uint32, np.uint64, np.float16, np.float32, np.float64)


def _elementwise(name: str, fn: Callable[..., torch.Tensor], arity: int) -> Callable[..., Any]:
    """A libdevice function for the interpreter: its tensors' numpy arrays through `fn`, broadcast like Triton."""

    def run(*args: Any, **kwargs: Any) -> Any:
        import triton.language as tl

        args = args[:arity]
        tensors = [a for a in args if type(a) is tl.tensor]
        if len(args) != arity or not tensors:
            raise Unsupported(f"libdevice.{name} with these arguments")
        scalars = []
        for arg in args:  # (the candidate's values are read here, before the exempt part below)
            value = arg if type(arg) is tl.tensor else getattr(arg, "value", arg)
            if type(value) is not tl.tensor and type(value) not in _SCALARS:
                raise Unsupported(f"libdevice.{name} with an argument of type {type(value).__name__}")
            scalars.append(value)
        return _compute(scalars, tensors)

    @compute_account.exempt  # this package's own torch ops on the interpreter's arrays: no work of the candidate's
    def _compute(values_in: list[Any], tensors: list[Any]) -> Any:
        import triton.language as tl
        from triton.runtime.interpreter import TensorHandle

        first = tensors[0]
        np_dtype = first.handle.data.dtype
        values = []
        for arg in values_in:
            if type(arg) is tl.tensor:
                values.append(torch.from_numpy(np.ascontiguousarray(arg.handle.data)))
            else:
                values.append(torch.tensor(arg, dtype=torch.from_numpy(np.zeros(1, np_dtype)).dtype))
        out = fn(*values).numpy().astype(np_dtype, copy=False)
        shaped = next((t for t in tensors if tuple(t.handle.data.shape) == out.shape), None)
        if shaped is None:
            raise Unsupported(f"libdevice.{name} on arguments of different shapes")
        return tl.tensor(TensorHandle(np.ascontiguousarray(out), shaped.handle.dtype), shaped.type)

    run.__name__ = name
    return run


def _missing(name: str) -> Callable[..., Any]:
    def run(*args: Any, **kwargs: Any) -> Any:
        raise Unsupported(f"libdevice.{name} has no implementation under the interpreter")

    run.__name__ = name
    return run


def _install_libdevice() -> None:
    import importlib

    for module_name in _LIBDEVICE_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ImportError:
            continue
        for name in [n for n, v in vars(module).items() if callable(v) and not n.startswith("_")
                     and getattr(v, "__module__", "") == module_name]:
            if name in _UNARY:
                replacement = _elementwise(name, _UNARY[name], 1)
            elif name in _BINARY:
                replacement = _elementwise(name, _BINARY[name], 2)
            elif name in _TERNARY:
                replacement = _elementwise(name, _TERNARY[name], 3)
            else:
                replacement = _missing(name)
            replacement.__module__ = module_name  # (what Triton checks to skip these in its kernel hashing)
            setattr(module, name, replacement)


def _install_autotune() -> None:
    try:
        from triton.runtime.autotuner import Autotuner
    except ImportError:
        return
    prune = Autotuner.prune_configs

    def first_config_only(self: Any, kwargs: dict[str, Any]) -> list[Any]:
        # One config left: the autotuner runs it without benchmarking (which needs the GPU driver).
        return list(prune(self, kwargs))[:1]

    Autotuner.prune_configs = first_config_only


def install() -> None:
    """Before the candidate is imported, in a child running under the interpreter. Best effort: with a Triton
    whose internals differ, what cannot be installed stays as it was (and fails as `unsupported` if used)."""
    for installer in (_install_autotune, _install_libdevice):
        try:
            installer()
        except Exception:  # noqa: BLE001 - never a reason for the sandbox to fail before the candidate runs
            pass


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen and len(seen) < 16:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def unsupported_reason(exc: BaseException) -> str:
    """'' when the failure is the kernel's own, else the verdict's message: what the interpreter lacks."""
    for link in _chain(exc):
        text = str(link).splitlines()[0][:300] if str(link) else type(link).__name__
        frames = traceback.extract_tb(link.__traceback__)
        raised_in = frames[-1].filename if frames else ""  # (only ours or Triton's raise counts: not the kernel's)
        if isinstance(link, Unsupported) and raised_in == __file__:
            return PREFIX + text
        if "active drivers" in text and raised_in.endswith(_DRIVER_FILE):
            return PREFIX + "it needs the GPU driver (" + text + ")"
        if isinstance(link, NotImplementedError) and raised_in.endswith(_INTERPRETER_FILE):
            return PREFIX + text
    return ""
