"""GPU check of the evaluator's CUDA (`load_inline`) backend on problem L1/19 (ReLU).

    python3 bench/gpu_cuda_backend.py --out $OUT/cuda_backend.json     # on the GPU machine (~2-3 min)
    python3 bench/gpu_cuda_backend.py --device cpu                      # offline: static checks only

On the GPU, every first-round candidate goes into ONE `Evaluator.evaluate` call so their nvcc
builds (30-60 s each) run in parallel in separate children; then a second call re-submits the
correct source, which must be a build-cache hit on the same worker. Cases:

- relu_correct: a correct kernel on the current stream: ok, correct, statically clean, a speedup.
- relu_wrong: max(x, 0.1): mismatch.
- relu_compile_error: a C++ syntax error inside the CUDA string: compile.
- relu_illegal_access: writes 2**36 floats past the output: runtime or crash; later evaluations still work.
- cublas_in_cuda_source, kernel_never_launched: static rejections with the hack flag (no build).
- relu_correct_again (second call): correct, versions["build_cache"] == "hit"; both build times printed.

With --device cpu nothing is built (without nvcc the evaluator could only answer "infra"): every
candidate source goes through the static policy, which must find the runtime cases clean and the
hacks rejected. Prints one line per case and a summary; writes JSON to --out; exits 1 if any fails.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO_ROOT))

from kernelbench_rl.evaluation.static_policy import check_static, is_hack  # noqa: E402
from kernelbench_rl.problems import get_problem  # noqa: E402

PROBLEM_ID = "L1/19"

# The module around every candidate: {cuda_body} is the CUDA string, {extra} extra load_inline arguments.
_MODULE_TEMPLATE = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = r"""
{cuda_body}
"""

ext = load_inline(name="{ext_name}", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["relu_cuda"], verbose=False{extra})


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return ext.relu_cuda(x.contiguous())
'''

# A grid-stride kernel launched on PyTorch's current stream (what the timer measures).
_RELU_CUDA = r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>

__global__ void relu_forward(const float* __restrict__ x, float* __restrict__ y, long long n) {
    long long stride = (long long)gridDim.x * blockDim.x;
    for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x; i < n; i += stride) {
        float v = x[i];
        y[i] = v > 0.f ? v : 0.f;
    }
}

torch::Tensor relu_cuda(torch::Tensor x) {
    TORCH_CHECK(x.is_cuda() && x.scalar_type() == torch::kFloat32, "expects a float32 CUDA tensor");
    auto y = torch::empty_like(x);
    long long n = x.numel();
    int threads = 256;
    long long blocks = (n + threads - 1) / threads;
    if (blocks > 65535LL * 32) blocks = 65535LL * 32;
    relu_forward<<<(unsigned int)blocks, threads, 0, at::cuda::getCurrentCUDAStream()>>>(
        x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""


def _module(cuda_body: str, ext_name: str, extra: str = "") -> str:
    return _MODULE_TEMPLATE.format(cuda_body=cuda_body.strip("\n"), ext_name=ext_name, extra=extra)


RELU_CORRECT = _module(_RELU_CUDA, "relu_ok_ext")

# Clamps at 0.1 instead of 0: most outputs differ from the reference.
RELU_WRONG = _module(_RELU_CUDA.replace("y[i] = v > 0.f ? v : 0.f;", "y[i] = v > 0.1f ? v : 0.1f;"), "relu_wrong_ext")

# A missing semicolon in device code: nvcc (inside load_inline) must fail; Python still parses.
RELU_COMPILE_ERROR = _module(_RELU_CUDA.replace("float v = x[i];", "float v = x[i]"), "relu_bad_ext")

# Every thread writes 2**36 floats (256 GiB) past the output: an illegal address on any GPU.
RELU_ILLEGAL_ACCESS = _module(_RELU_CUDA.replace("y[i] = v > 0.f ? v : 0.f;", "y[i + (1LL << 36)] = v > 0.f ? v : 0.f;"),
                              "relu_oob_ext")

# cuBLAS inside the CUDA source (a vendor library doing the work): the static policy's library_call.
CUBLAS_IN_CUDA_SOURCE = _module(r"""
#include <torch/extension.h>
#include <ATen/cuda/CUDAContext.h>
#include <cublas_v2.h>

__global__ void relu_inplace(float* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n && y[i] < 0.f) y[i] = 0.f;
}

torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    int n = (int)x.numel();
    cublasHandle_t handle;
    cublasCreate(&handle);
    cublasSetStream(handle, at::cuda::getCurrentCUDAStream());
    cublasScopy(handle, n, x.data_ptr<float>(), 1, y.data_ptr<float>(), 1);
    cublasDestroy(handle);
    relu_inplace<<<(n + 255) / 256, 256, 0, at::cuda::getCurrentCUDAStream()>>>(y.data_ptr<float>(), n);
    return y;
}
""", "relu_cublas_ext", extra=', extra_ldflags=["-lcublas"]')

# A decoy kernel that is never launched; the host glue computes with ATen: backend_not_used.
KERNEL_NEVER_LAUNCHED = _module(r"""
#include <torch/extension.h>

__global__ void relu_decoy(const float* x, float* y, long long n) {
    long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

torch::Tensor relu_cuda(torch::Tensor x) {
    return x.clamp_min(0);
}
""", "relu_decoy_ext")


@dataclasses.dataclass(frozen=True)
class Expectation:
    """What the evaluator must say about one candidate."""

    categories: tuple[str, ...]  # acceptable error_category values
    correct: bool
    static_clean: bool  # the static policy must find no error (so the GPU run tests the runtime)
    hack: bool = False  # Flag.HACK must be set
    speedup: bool = False  # a speedup must be reported
    build_cache: str | None = None  # required versions["build_cache"]
    second_call: bool = False  # submitted in the second evaluate call (after the first batch)
    needs: str | None = None  # a case of the first call this one depends on

    def describe(self) -> str:
        parts = ["|".join(self.categories), f"correct={self.correct}"]
        if self.hack:
            parts.append("hack")
        if self.build_cache:
            parts.append(f"cache={self.build_cache}")
        return " ".join(parts)


CASES: dict[str, tuple[str, Expectation]] = {
    "relu_correct": (RELU_CORRECT, Expectation(("ok",), True, True, speedup=True, build_cache="miss")),
    "relu_wrong": (RELU_WRONG, Expectation(("mismatch",), False, True)),
    "relu_compile_error": (RELU_COMPILE_ERROR, Expectation(("compile",), False, True)),
    "relu_illegal_access": (RELU_ILLEGAL_ACCESS, Expectation(("runtime", "crash"), False, True)),
    "cublas_in_cuda_source": (CUBLAS_IN_CUDA_SOURCE, Expectation(("static",), False, False, hack=True)),
    "kernel_never_launched": (KERNEL_NEVER_LAUNCHED, Expectation(("static",), False, False, hack=True)),
    "relu_correct_again": (RELU_CORRECT, Expectation(("ok",), True, True, speedup=True, build_cache="hit",
                                                     second_call=True, needs="relu_correct")),
}

SHOWN_PHASES = ("compile", "build", "worker_total")


def judge(expectation: Expectation, result: Any) -> list[str]:
    """Reasons the result misses the expectation (empty: the case passes)."""
    problems: list[str] = []
    category = result.error_category.value
    if category not in expectation.categories:
        problems.append(f"category {category}, expected {'|'.join(expectation.categories)}")
    if result.correct != expectation.correct:
        problems.append(f"correct={result.correct}")
    if expectation.static_clean and result.static.errors:
        problems.append(f"static errors: {'; '.join(result.static.errors)[:200]}")
    if expectation.hack and "hack" not in result.flags:
        problems.append("no hack flag")
    if not expectation.hack and "hack" in result.flags:
        problems.append("unexpected hack flag")
    if expectation.speedup and result.speedup is None:
        problems.append("no speedup reported")
    got_cache = result.versions.get("build_cache")
    if expectation.build_cache and got_cache != expectation.build_cache:
        problems.append(f"build_cache={got_cache}, expected {expectation.build_cache}")
    return problems


def judge_static(expectation: Expectation, errors: list[str], hack: bool) -> list[str]:
    """CPU mode: only what the static policy decides."""
    if expectation.static_clean:
        return [f"static errors: {'; '.join(errors)[:200]}"] if errors else []
    problems = [] if errors else ["the static policy accepted it"]
    if expectation.hack and not hack:
        problems.append("rejected, but by no hack rule")
    return problems


def _result_line(name: str, expectation: Expectation, result: Any, problems: list[str]) -> str:
    phases = result.phase_seconds
    shown = " ".join(f"{k}={phases[k]:.1f}s" for k in SHOWN_PHASES if k in phases) or "-"
    speed = f"{result.speedup:.2f}x" if result.speedup is not None else "-"
    got = f"{result.error_category.value} correct={result.correct} speedup={speed} flags={','.join(result.flags) or '-'}"
    verdict = "PASS" if not problems else "FAIL (" + "; ".join(problems) + ")"
    return (f"{verdict} {name:24s} expected[{expectation.describe()}] got[{got}] "
            f"build_cache={result.versions.get('build_cache', '-')} {shown}"
            + (f" | {result.error_message[:160]!r}" if result.error_message else ""))


def selected_cases(only: list[str] | None) -> list[str]:
    """The chosen cases plus what they depend on, in CASES order."""
    if not only:
        return list(CASES)
    unknown = [name for name in only if name not in CASES]
    if unknown:
        raise SystemExit(f"unknown case(s): {', '.join(unknown)}; known: {', '.join(CASES)}")
    chosen = set(only)
    for name in only:
        needs = CASES[name][1].needs
        if needs:
            chosen.add(needs)
    return [name for name in CASES if name in chosen]


def run_static(names: list[str]) -> tuple[list[dict[str, Any]], str]:
    reference = get_problem(PROBLEM_ID).source
    rows = []
    for name in names:
        source, expectation = CASES[name]
        report = check_static(source, "cuda", reference_source=reference)
        hack = is_hack(report)
        problems = judge_static(expectation, report.errors, hack)
        verdict = "PASS" if not problems else "FAIL (" + "; ".join(problems) + ")"
        got = "clean" if report.ok else f"rejected{' (hack)' if hack else ''}: {'; '.join(report.errors)[:160]}"
        print(f"{verdict} {name:24s} static expected[{'clean' if expectation.static_clean else 'rejected'}] got[{got}]",
              flush=True)
        rows.append({"case": name, "pass": not problems, "problems": problems, "static_errors": report.errors,
                     "static_warnings": report.warnings, "hack": hack})
    return rows, "cpu (static checks only)"


def run_gpu(names: list[str], timeout_s: float) -> tuple[list[dict[str, Any]], str]:
    from kernelbench_rl.evaluation.api import Evaluator
    from kernelbench_rl.evaluation.pool import default_parallel_compiles
    from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings

    settings = EvalSettings(device="cuda", size="real", backend="cuda", timeout_s=timeout_s)
    rounds = [[n for n in names if not CASES[n][1].second_call], [n for n in names if CASES[n][1].second_call]]
    rows: list[dict[str, Any]] = []
    hardware = ""
    # Enough children compiling at once that the whole first round builds in parallel.
    parallel = max(len(rounds[0]), default_parallel_compiles("cuda"))
    with Evaluator(settings, store=None, parallel_compiles=parallel) as evaluator:
        for index, batch in enumerate(rounds):
            if not batch:
                continue
            started = time.perf_counter()
            results = evaluator.evaluate([EvalRequest(PROBLEM_ID, CASES[n][0], settings, request_id=n) for n in batch])
            print(f"-- evaluate call {index + 1}: {len(batch)} candidates in {time.perf_counter() - started:.1f} s", flush=True)
            for name, result in zip(batch, results):
                expectation = CASES[name][1]
                problems = judge(expectation, result)
                hardware = hardware or result.hardware
                print(_result_line(name, expectation, result, problems), flush=True)
                rows.append({"case": name, "pass": not problems, "problems": problems,
                             "expected": dataclasses.asdict(expectation), "result": json.loads(result.to_json())})
    _print_build_times(rows)
    return rows, hardware or "unknown GPU"


def _print_build_times(rows: list[dict[str, Any]]) -> None:
    """The build cache's effect: compile (import, where load_inline builds) of the miss and of the hit."""
    by_case = {row["case"]: row["result"]["phase_seconds"] for row in rows if "result" in row}
    first, again = by_case.get("relu_correct"), by_case.get("relu_correct_again")
    if not first or not again:
        return
    miss_s, hit_s = first.get("compile", 0.0), again.get("compile", 0.0)
    print(f"build time of the same source: miss compile={miss_s:.1f}s build={first.get('build', 0.0):.1f}s, "
          f"hit compile={hit_s:.1f}s build={again.get('build', 0.0):.1f}s", flush=True)
    if miss_s > 0 and hit_s > 0.5 * miss_s:
        print("NOTE: the cache hit did not shorten the build much (a copied torch_extensions dir at a new path "
              "may be rebuilt by ninja, whose commands name the sources by absolute path)", flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", default="", help="write the JSON report here")
    parser.add_argument("--timeout", type=float, default=240.0, help="per-evaluation timeout_s")
    parser.add_argument("--only", nargs="+", metavar="NAME", help=f"cases to run (of: {', '.join(CASES)})")
    parser.add_argument("--device", choices=("cuda", "cpu"), default="cuda",
                        help="cpu: only the static checks of every candidate (no nvcc needed)")
    args = parser.parse_args(argv)
    names = selected_cases(args.only)
    started = time.perf_counter()
    rows, where = run_static(names) if args.device == "cpu" else run_gpu(names, args.timeout)
    passed = sum(row["pass"] for row in rows)
    print(f"{passed}/{len(rows)} cases pass on {where} ({time.perf_counter() - started:.1f} s)", flush=True)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"device": args.device, "hardware": where, "passed": passed,
                                              "total": len(rows), "cases": rows}, indent=1))
        print(f"wrote {args.out}")
    return 0 if passed == len(rows) else 1


if __name__ == "__main__":
    sys.exit(main())
