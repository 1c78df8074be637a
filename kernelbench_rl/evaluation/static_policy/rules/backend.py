"""The backend really used: a Triton kernel launched or a CUDA kernel compiled and called from forward; no
torch.compile, no vendor or ATen library calls in the CUDA source, no decoy kernels (a warning).
"""

from __future__ import annotations

import ast
import re
from typing import TYPE_CHECKING

from kernelbench_rl.evaluation.static_policy.names import docstring_nodes
from kernelbench_rl.evaluation.static_policy.rule import Finding, Rule, line_of
from kernelbench_rl.evaluation.static_policy.vocabulary import (
    COMPUTE_NAMES,
    CONTAINER_METHODS,
    FUNCTIONAL_COMPUTE,
    TENSOR_COMPUTE_METHODS,
    under,
)

if TYPE_CHECKING:
    from kernelbench_rl.evaluation.static_policy.analysis import Analysis


def _torch_compile(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for node, qn in a.references():
        if a.classify_torch(qn) == "compile":
            found.append((line_of(node), f"{qn} is not allowed; write the kernel yourself"))
    return found


def _triton_launched(a: Analysis) -> tuple[bool, set[str]]:
    launched_names: set[str] = set()
    any_launch = False
    for call, scan, info in a.path_calls():
        if info.kind == "kernel_launch":
            any_launch = True
            launched_names |= {n.id for n in ast.walk(call.func) if isinstance(n, ast.Name)}
    return any_launch, launched_names


_GLOBAL_FN = re.compile(r"__global__\s+(?:__launch_bounds__\s*\([^)]*\)\s*)?(?:static\s+)?void\s+"
                        r"(?:__launch_bounds__\s*\([^)]*\)\s*)?(\w+)")


def _backend_not_used(a: Analysis) -> list[Finding]:
    if a.model_new is None:
        return []
    if a.backend == "triton":
        if not a.jit_kernels:
            return [(0, "no @triton.jit kernel is defined")]
        launched, _ = _triton_launched(a)
        if not launched:
            names = ", ".join(sorted(a.jit_kernels))
            return [(0, f"no @triton.jit kernel is launched (kernel[grid](...)) from ModelNew.forward; defined: {names}")]
        return []
    cuda_text = "\n".join(a.cuda_sources)
    kernels = _GLOBAL_FN.findall(cuda_text)
    if not kernels:
        return [(0, "no __global__ kernel in a CUDA source string")]
    if not a.extension_calls:
        return [(0, "the CUDA source is never compiled with torch.utils.cpp_extension.load_inline")]
    launched_kernels = [k for k in kernels if re.search(rf"\b{re.escape(k)}\s*(<[^;()]*>)?\s*<<<", cuda_text)
                        or re.search(rf"cudaLaunch\w*\s*\([^;]*\b{re.escape(k)}\b", cuda_text)
                        or len(re.findall(rf"\b{re.escape(k)}\b", cuda_text)) >= 2]
    found: list[Finding] = []
    if not launched_kernels:
        found.append((0, f"the __global__ kernel {kernels[0]} is never launched (<<<...>>>) in the CUDA source"))
    if not any(info.kind == "extension" for _c, _s, info in a.path_calls()):
        found.append((0, "the compiled CUDA extension is never called from ModelNew.forward"))
    return found


def _unused_kernel(a: Analysis) -> list[Finding]:
    used: set[str] = set()
    for node in a.all_nodes:
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id in a.jit_kernels:
            used.add(node.id)
    found = [(line_of(fn), f"@triton.jit kernel {name} is defined but never used") for name, fn in a.jit_kernels.items() if name not in used]
    if a.backend == "cuda" and a.cuda_sources:
        text = "\n".join(a.cuda_sources)
        for name in _GLOBAL_FN.findall(text):
            if len(re.findall(rf"\b{re.escape(name)}\b", text)) < 2:
                found.append((0, f"__global__ kernel {name} is defined but never launched"))
    return found


_CPP_TORCH_CALL = re.compile(r"\b(?:at|torch)::(?:native::|nn::functional::|cuda::blas::)?(\w+)\s*\(")


# at::/torch:: functions and tensor methods that compute, as called from C++ (`at::clamp_min(x, 0)`,
# `x.clamp_min(0)`). Method names std containers share (CONTAINER_METHODS such as add, sort, count;
# any/all/equal) stay out of the method pattern; dunders have no C++ spelling.
_CPP_COMPUTE_CALLS = COMPUTE_NAMES | TENSOR_COMPUTE_METHODS


_CPP_COMPUTE_METHODS = {
    name for name in (TENSOR_COMPUTE_METHODS | FUNCTIONAL_COMPUTE)
    if not name.startswith("__") and name not in CONTAINER_METHODS and name not in {"all", "any", "equal"}
}


_CPP_TENSOR_METHOD = re.compile(r"\.\s*(" + "|".join(map(re.escape, sorted(_CPP_COMPUTE_METHODS, key=len, reverse=True)))
                                + r")\s*\(")


_CPP_ALLOWED_TORCH = frozenset({"empty", "empty_like", "empty_strided", "zeros", "zeros_like", "ones", "ones_like",
                                "full", "full_like", "arange", "tensor", "from_blob", "dtype", "device", "TensorOptions",
                                "Tensor", "Scalar", "IntArrayRef", "DeviceGuard", "OptionalDeviceGuard", "cat", "stack"})


def _library_call(a: Analysis) -> list[Finding]:
    found: list[Finding] = []
    for text in a.cuda_sources:
        for match in re.finditer(r"\b(cublas\w*|cudnn\w*)\s*\(", text):
            found.append((0, f"{match.group(1)} in the CUDA source: vendor libraries instead of your own kernel"))
        for match in re.finditer(r"#include\s*[<\"](cublas\w*|cudnn\w*)", text):
            found.append((0, f"#include <{match.group(1)}...>: cuBLAS/cuDNN are not allowed"))
        for match in _CPP_TORCH_CALL.finditer(text):
            name = match.group(1)
            if name in _CPP_ALLOWED_TORCH:
                continue
            qualified = match.group(0)
            if name in _CPP_COMPUTE_CALLS or name.startswith("_") or any(ns in qualified for ns in ("native::", "functional::", "blas::")):
                found.append((0, f"{match.group(0).rstrip('( ')} in the CUDA source computes in PyTorch; write it in your kernel"))
        for match in _CPP_TENSOR_METHOD.finditer(text):
            found.append((0, f".{match.group(1)}() on a tensor in the CUDA source computes in PyTorch"))
    docstrings = docstring_nodes(a.tree)
    for node in a.all_nodes:
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
            match = re.search(r"-l(cublas\w*|cudnn\w*)\b", node.value)
            if match:
                found.append((line_of(node), f"links {match.group(1)}: vendor libraries instead of your own kernel"))
    for node, qn in a.references():
        if under(qn, "triton.ops") or under(qn, "triton.kernels"):
            found.append((line_of(node), f"{qn}: library kernels instead of your own"))
    return found


TORCH_COMPILE = Rule(
    "torch_compile", "error",
    "No torch.compile, torch.jit, torch._dynamo, torch._inductor or torch.export.",
    _torch_compile, hack=True,
)
BACKEND_NOT_USED = Rule(
    "backend_not_used", "error",
    "The backend must really be used: a @triton.jit kernel launched from forward, or a __global__ CUDA kernel "
    "compiled with load_inline and called from forward.",
    _backend_not_used, hack=True,
)
LIBRARY_CALL = Rule(
    "library_call", "error",
    "No cuBLAS/cuDNN or ATen compute inside CUDA source; no triton.ops library kernels.",
    _library_call, hack=True,
)
UNUSED_KERNEL = Rule(
    "unused_kernel", "warning",
    "A kernel that is defined but never launched (a decoy or dead code).",
    _unused_kernel,
)
