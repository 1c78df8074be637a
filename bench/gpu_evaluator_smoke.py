"""GPU smoke run of the evaluator: every bundled solution plus planted hacks, per-phase costs.

    python bench/gpu_evaluator_smoke.py --budget-s 420 --out results.json

Prints one line per evaluation and a table of per-phase medians (child start, CUDA init, compile,
correctness, baseline, timing, profile, worker total); writes everything as JSON. No assertions:
it is a measurement; the verdicts it prints are what to read.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernelbench_rl.evaluation.api import Evaluator  # noqa: E402
from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings  # noqa: E402
from kernelbench_rl.problems import get_problem, list_solutions, load_solution  # noqa: E402

RELU_HEAD = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    x = tl.load(x_ptr + offs, mask=mask)
    tl.store(out_ptr + offs, tl.maximum(x, 0.0), mask=mask)


def relu(x):
    out = torch.empty_like(x)
    relu_kernel[(triton.cdiv(x.numel(), 4096),)](x, out, x.numel(), BLOCK=4096)
    return out
'''

HACKS = {
    "memoise_by_data_ptr": RELU_HEAD + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.memo = {}

    def forward(self, x):
        key = (x.data_ptr(), tuple(x.shape))
        if key not in self.memo:
            self.memo[key] = relu(x)
        return self.memo[key]
''',
    "timer_patch": RELU_HEAD + '''
torch.cuda.Event.elapsed_time = lambda self, end: 0.001


class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x)
''',
    "decoy_kernel": RELU_HEAD + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
''',
    "illegal_address": RELU_HEAD.replace("tl.store(out_ptr + offs,", "tl.store(out_ptr + offs * 1000000007,") + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return relu(x)
''',
    "returns_empty": RELU_HEAD + '''
class ModelNew(nn.Module):
    def forward(self, x):
        return torch.empty_like(x)
''',
    "side_stream": RELU_HEAD + '''
class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.stream = torch.cuda.Stream()

    def forward(self, x):
        with torch.cuda.stream(self.stream):
            return relu(x)
''',
}

CUDA_RELU = r'''
import torch
import torch.nn as nn
from torch.utils.cpp_extension import load_inline

cuda_src = """
#include <torch/extension.h>
__global__ void relu_fwd(const float* x, float* y, long n) {
    long i = blockIdx.x * (long)blockDim.x + threadIdx.x;
    if (i < n) { float v = x[i]; y[i] = v > 0.f ? v : 0.f; }
}
torch::Tensor relu_cuda(torch::Tensor x) {
    auto y = torch::empty_like(x);
    long n = x.numel();
    relu_fwd<<<(n + 255) / 256, 256>>>(x.data_ptr<float>(), y.data_ptr<float>(), n);
    return y;
}
"""
ext = load_inline(name="relu_ext", cpp_sources="torch::Tensor relu_cuda(torch::Tensor x);",
                  cuda_sources=cuda_src, functions=["relu_cuda"], verbose=False)


class ModelNew(nn.Module):
    def forward(self, x):
        return ext.relu_cuda(x.contiguous())
'''

PHASES = ["child_start", "cuda_init", "compile", "correctness", "baseline", "timing", "profile", "worker_total", "wall"]


def _line(label: str, result) -> str:
    ph = result.phase_seconds
    speed = f"{result.speedup:.2f}x" if result.speedup else "-"
    return (f"{label:28s} {result.error_category.value:9s} correct={result.correct!s:5s} speedup={speed:8s} "
            f"flags={','.join(result.flags) or '-'} | " + " ".join(f"{k}={ph[k]:.3f}" for k in PHASES if k in ph)
            + (f" | {result.error_message[:160]}" if result.error_message else ""))


def run(args: argparse.Namespace) -> dict:
    started = time.monotonic()
    report: dict = {"configs": {}}
    settings = EvalSettings(device="cuda", size="real", timeout_s=120, timing_trials=args.trials)
    configs = [("default", [])] + ([("no_drop_uid", ["--no-drop-uid"])] if args.compare_uid else [])
    for name, worker_args in configs:
        rows = []
        t = time.perf_counter()
        with Evaluator(settings, static_checks=False, worker_args=worker_args, parallel_compiles=4, warm_children=2) as ev:
            infos = ev.pool.wait_ready()
            startup = time.perf_counter() - t
            print(f"[{name}] workers ready in {startup:.1f} s: {infos}", flush=True)
            items = list_solutions() if name == "default" else list_solutions()[: args.subset]
            plan = [(pid, Path(path).read_text(), "solution", "triton") for pid, path in items]
            if name == "default":
                plan = [(("L1/19"), src, label, "triton") for label, src in HACKS.items()] + plan
                if args.limit:
                    plan = plan[: len(HACKS) + args.limit]
            batch_t = time.perf_counter()
            for pid, source, label, backend in plan:
                if time.monotonic() - started > (args.budget_s if name != "default" else args.budget_s - args.reserve_s):
                    print("budget spent; stopping", flush=True)
                    break
                s = EvalSettings(**{**settings.__dict__, "backend": backend})
                w = time.perf_counter()
                result = ev.evaluate([EvalRequest(pid, source, s)])[0]
                result.phase_seconds["wall"] = time.perf_counter() - w
                print(_line(f"{pid} {label}", result), flush=True)
                rows.append({"problem": pid, "label": label, **json.loads(result.to_json())})
            batch = time.perf_counter() - batch_t
            if args.cuda and name == "default" and time.monotonic() - started < args.budget_s - 90:
                s = EvalSettings(**{**settings.__dict__, "backend": "cuda"})
                w = time.perf_counter()
                result = ev.evaluate([EvalRequest("L1/19", CUDA_RELU, s)])[0]
                result.phase_seconds["wall"] = time.perf_counter() - w
                print(_line("L1/19 cuda_load_inline", result), flush=True)
                rows.append({"problem": "L1/19", "label": "cuda", **json.loads(result.to_json())})
        medians = {}
        solved = [r for r in rows if r["label"] == "solution"]
        for phase in PHASES:
            values = [r["phase_seconds"][phase] for r in solved if phase in r["phase_seconds"]]
            if values:
                medians[phase] = statistics.median(values)
        report["configs"][name] = {"startup_s": startup, "batch_s": batch, "rows": rows, "phase_medians": medians}
        print(f"[{name}] phase medians over {len(solved)} solutions: "
              + " ".join(f"{k}={v:.3f}" for k, v in medians.items()), flush=True)
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--budget-s", type=float, default=420)
    parser.add_argument("--trials", type=int, default=50)
    parser.add_argument("--compare-uid", action="store_true", help="also run a subset without dropping root")
    parser.add_argument("--subset", type=int, default=4)
    parser.add_argument("--limit", type=int, default=0, help="only this many solutions after the hacks (0: all)")
    parser.add_argument("--reserve-s", type=float, default=0, help="seconds kept for the second configuration")
    parser.add_argument("--cuda", action="store_true", help="also evaluate a load_inline CUDA candidate (~60 s build)")
    parser.add_argument("--out", default="gpu_evaluator_smoke.json")
    args = parser.parse_args()
    report = run(args)
    Path(args.out).write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
