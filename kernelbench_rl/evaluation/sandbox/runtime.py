"""Loading a KernelBench-format module and making its models and inputs (worker and child side).

The reference and the candidate are built the same way: the same seed before construction (so
parameters match), inputs made directly on the device by the problem's own `get_inputs()` with the
default generator seeded per hidden seed (never on the CPU and copied: that dominates KernelBench's
harness), floating tensors cast to the requested precision. Once the inputs or the model exist, every generator
either process's code can read is reseeded from fresh entropy (`fresh_generators`): nothing drawn from a hidden seed
stays observable to the candidate.
"""

from __future__ import annotations

import ast
import importlib.util
import random
import secrets
import sys
import types
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import Any

import torch

from kernelbench_rl.evaluation.sandbox import perturbation

PRECISION_DTYPES: dict[str, torch.dtype] = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def load_module_from_file(path: str | Path, name: str, register: bool = True) -> types.ModuleType:
    """Import a file as a module (registered in sys.modules: Triton reads kernels' source via inspect)."""
    spec = importlib.util.spec_from_file_location(name, str(path))
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        if not register:
            sys.modules.pop(name, None)
    return module


def without_reference_model(source: str, class_name: str = "Model") -> str:
    """The problem source minus its reference class: what a sandboxed child may see.

    The child needs get_inputs()/get_init_inputs() to make the same inputs, but the reference
    Model must not exist in the candidate's process (it could be found and reused).
    """
    tree = ast.parse(source)
    lines = source.splitlines(keepends=True)
    spans = []
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == class_name:
            start = min([node.lineno] + [d.lineno for d in node.decorator_list])
            spans.append((start, node.end_lineno or node.lineno))
    for start, end in sorted(spans, reverse=True):
        lines[start - 1:end] = ["\n"]
    return "".join(lines)


def seed_everything(seed: int) -> None:
    torch.manual_seed(seed)  # seeds the CPU and every CUDA generator
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.manual_seed_all(seed)


def fresh_generators() -> None:
    """Every generator a problem's or a candidate's code can read, reseeded from fresh entropy (secrets): torch's CPU
    generator and every CUDA one (the seed queued for CUDA's start where it has not started), Python's `random` and
    NumPy's global one. Called once a seed's inputs or a model exist: what was drawn from a hidden seed stays drawn,
    but `torch.initial_seed()`, `torch.get_rng_state()`, the next `torch.rand` or `random.random()` no longer tell the
    seed, so the candidate cannot recognise a seed, redraw a perturbation's sites from it, or tell its calls apart.
    Both sides call it (make_inputs, build_model), so the worker's input making costs what the child's does."""
    torch.default_generator.manual_seed(secrets.randbits(63))
    if torch.cuda.is_initialized():
        for generator in torch.cuda.default_generators:
            generator.manual_seed(secrets.randbits(63))
    else:
        torch.cuda.manual_seed_all(secrets.randbits(63))  # replaces the hidden seed queued for CUDA's start
    random.seed(secrets.randbits(64))
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        numpy.random.seed(secrets.randbits(32))


@contextmanager
def python_random_seeded(seed: int):
    """Python's own generator seeded for a problem's code, then put back as it was.

    A problem may draw its inputs from `random` (kernrl's modular exponentiation): the reference's process and the
    candidate's must draw the same ones. The caller's own draws (the worker picks hidden seeds) stay its own."""
    state = random.getstate()
    random.seed(seed)
    try:
        yield
    finally:
        random.setstate(state)


def _device_scope(device: str):
    return torch.device(device) if device != "cpu" else nullcontext()


def cast_floating(value: Any, dtype: torch.dtype) -> Any:
    """An fp32 tensor in the requested precision. Tensors the problem made in another floating dtype (fp16
    activations of a quantized GEMM, fp8 weights) keep it: the problem chose it, and its model expects it."""
    if isinstance(value, torch.Tensor) and value.dtype == torch.float32 and value.dtype != dtype:
        return value.to(dtype)
    return value


def make_inputs(module: types.ModuleType, seed: int, device: str, precision: str,
                variant: dict[str, Any] | None = None) -> list[Any]:
    """The problem's inputs for `seed`; with a `variant` (discrimination.py: widened; sensitivity.py: perturbed, or
    at a second shape), made the same way on both sides."""
    dtype = PRECISION_DTYPES[precision]
    seed_everything(seed)
    with _device_scope(device), python_random_seeded(seed), perturbation.constants_applied(module, variant):
        inputs = list(module.get_inputs())
    inputs = [cast_floating(x.to(device) if isinstance(x, torch.Tensor) else x, dtype) for x in inputs]
    inputs = perturbation.perturb_inputs(apply_variant(inputs, variant), seed, variant)
    fresh_generators()
    return inputs


def apply_variant(inputs: list[Any], variant: dict[str, Any] | None) -> list[Any]:
    """Widened inputs (discrimination.py): some floating inputs mapped by x -> x * scale + shift, in place (inputs
    are made fresh for every seed). {"name": ..., "affine": [[input index, scale, shift], ...]}."""
    if not variant:
        return inputs
    for index, scale, shift in variant.get("affine", ()):
        tensor = inputs[int(index)]
        if not isinstance(tensor, torch.Tensor) or not tensor.is_floating_point():
            raise ValueError(f"input variant {variant['name']!r} maps input {index}, which is not a floating tensor")
        tensor.mul_(float(scale))
        if shift:
            tensor.add_(float(shift))
    return inputs


def build_model(cls: type, problem: types.ModuleType, seed: int, device: str, precision: str) -> torch.nn.Module:
    """Construct `cls` with the problem's init inputs after `seed`, on `device`, in `precision` (in eval mode where
    the problem's source sets `KBRL_EVAL_MODE`)."""
    dtype = PRECISION_DTYPES[precision]
    seed_everything(seed)
    with _device_scope(device), python_random_seeded(seed):
        init_inputs = list(problem.get_init_inputs()) if hasattr(problem, "get_init_inputs") else []
        model = cls(*init_inputs)
    if isinstance(model, torch.nn.Module):
        model = model.to(device)
        if dtype != torch.float32:
            model = model.to(dtype)
        # A problem that runs in eval mode (Problem.eval_mode: kernrl's suite, or a reference asserting
        # `not self.training`) says so in its source; the reference and the candidate both honour it.
        if getattr(problem, "KBRL_EVAL_MODE", False):
            model.eval()
    fresh_generators()  # the build seed (the same for every candidate of the problem) no more observable than a seed
    return model


def clone_inputs(inputs: list[Any]) -> list[Any]:
    return [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]


def tensor_inputs(inputs: list[Any]) -> list[torch.Tensor]:
    return [x for x in inputs if isinstance(x, torch.Tensor)]


def make_library_handles() -> None:
    """cuBLAS's (plain and Lt) and cuDNN's handles and libraries on the current CUDA device: a tiny linear with a
    bias, a matmul and a conv2d. The first use of each in a process costs up to seconds (loading the libraries,
    creating handles); callers do it where that is off the critical path. Raises what CUDA raises."""
    a = torch.ones(16, 16, device="cuda")
    torch.nn.functional.linear(a, a, a[0])  # cublasLt (with a bias) and cuBLAS
    (a @ a).sum()
    torch.nn.functional.conv2d(a.view(1, 4, 8, 8), a.view(4, 4, 4, 4)[:, :, :3, :3].contiguous())  # cuDNN
    torch.cuda.synchronize()

