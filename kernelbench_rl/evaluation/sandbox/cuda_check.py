"""CPU-mode check of a CUDA candidate: compile its kernels with nvcc, as far as that is possible.

torch's CUDA headers do not compile against the CPU build of torch, so the host glue (anything
that uses torch::Tensor) is dropped and only the device code is compiled: `#include`/`#define`
lines that are not torch's, and every `__global__`/`__device__` function (with its template
header). Runs inside the sandboxed child. Standard library only.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess

from kernelbench_rl.evaluation.source.kernels import cuda_source_strings

_TORCH_INCLUDE = re.compile(r"#\s*include\s*[<\"](torch|ATen|c10|pybind11|Python)")
_FUNC_START = re.compile(r"(template\s*<[^>]*>\s*)?((?:static\s+|inline\s+|__forceinline__\s+)*__(?:global|device)__\b)")


def _matching_brace(text: str, open_index: int) -> int:
    depth = 0
    for index in range(open_index, len(text)):
        if text[index] == "{":
            depth += 1
        elif text[index] == "}":
            depth -= 1
            if depth == 0:
                return index
    return -1


def device_code(cuda_source: str) -> str:
    lines = [
        ln for ln in cuda_source.splitlines()
        if ln.lstrip().startswith(("#include", "#define", "#pragma")) and not _TORCH_INCLUDE.search(ln)
    ]
    parts = ["\n".join(lines)]
    position = 0
    while True:
        match = _FUNC_START.search(cuda_source, position)
        if not match:
            break
        brace = cuda_source.find("{", match.end())
        semicolon = cuda_source.find(";", match.end())
        if brace < 0 or (0 <= semicolon < brace):  # a declaration, not a definition
            position = match.end()
            continue
        end = _matching_brace(cuda_source, brace)
        if end < 0:
            parts.append(cuda_source[match.start():])  # unbalanced: let nvcc say so
            break
        parts.append(cuda_source[match.start(): end + 1])
        position = end + 1
    return "\n\n".join(parts) + "\n"


def _key_lines(output: str) -> str:
    errors = [ln.strip() for ln in output.splitlines() if "error" in ln.lower()]
    return "\n".join((errors or output.strip().splitlines()[-5:])[:6])[:700]


def nvcc_check(candidate_source: str, workdir: str, nvcc: str = "nvcc", timeout_s: float = 180.0) -> tuple[bool, str]:
    """(compiled, message). Without nvcc: (False, a sentence saying CUDA needs a GPU or nvcc)."""
    sources = cuda_source_strings(candidate_source)
    if not sources:
        return False, "no CUDA source with a __global__ kernel was found in the module"
    if shutil.which(nvcc) is None:
        return False, "cannot run CUDA candidates on CPU: no GPU and no nvcc to compile the kernel source"
    path = os.path.join(workdir, "kernels.cu")
    with open(path, "w") as handle:
        handle.write("\n\n".join(device_code(s) for s in sources))
    try:
        proc = subprocess.run(
            [nvcc, "-c", "-std=c++17", "-x", "cu", path, "-o", os.path.join(workdir, "kernels.o")],
            capture_output=True, text=True, timeout=timeout_s, cwd=workdir,
        )
    except subprocess.TimeoutExpired:
        return False, f"nvcc did not finish within {timeout_s:.0f} s"
    if proc.returncode != 0:
        text = (proc.stderr + proc.stdout).replace(path, "kernel.cu")
        return False, "nvcc: " + _key_lines(text)
    return True, "the kernel source compiled with nvcc (device code only; host glue needs a GPU build of torch)"
