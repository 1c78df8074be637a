"""Our bundled Triton solutions are correct against their references (CPU, Triton interpreter).

Each solution runs in its own process with TRITON_INTERPRET=1 set before triton is imported.
Importing torch and triton costs ~2.5 s per process on CI's 2 cores, so one helper process
imports them once (with the interpreter switched on) and forks a fresh child per solution: every
solution still gets its own process and module namespace, and a crash or hang ends only its child.
Models are built like KernelBench's harness does: Model(*init) and ModelNew(*init) each right
after torch.manual_seed(seed), fed clones of the same inputs, compared with torch.allclose at
the fp32 tolerance, over two seeds.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kernelbench_rl.problems import get_problem, list_solutions

SEEDS = (42, 7)
ATOL = RTOL = 1e-4
PER_SOLUTION_TIMEOUT_S = 60

# Runs in the helper process. Reads jobs (JSON list) on stdin; prints one JSON result per job.
_FORK_RUNNER = r'''
import json, os, signal, sys, tempfile, time, traceback
assert os.environ.get("TRITON_INTERPRET") == "1"
import torch
import triton  # imported after TRITON_INTERPRET is set, so @triton.jit builds interpreted kernels
import triton.language

def run_one(job):
    def load(source, label):
        ns = {"__name__": label}
        exec(compile(source, "<" + label + ">", "exec"), ns)
        return ns
    ref = load(job["problem_source"], "reference")
    sol = load(job["solution_source"], "solution")
    max_err = 0.0
    for seed in job["seeds"]:
        torch.manual_seed(seed)
        inputs = ref["get_inputs"]()
        init = ref["get_init_inputs"]()
        torch.manual_seed(seed)
        model = ref["Model"](*init)
        torch.manual_seed(seed)
        model_new = sol["ModelNew"](*init)
        clone = lambda xs: [x.clone() if isinstance(x, torch.Tensor) else x for x in xs]
        new_inputs = clone(inputs)
        with torch.no_grad():
            expected = model(*clone(inputs))
            got = model_new(*new_inputs)
        if not isinstance(got, torch.Tensor):
            return {"ok": False, "error": f"ModelNew returned {type(got).__name__}, not a tensor"}
        if got.shape != expected.shape or got.dtype != expected.dtype:
            return {"ok": False, "error": f"seed {seed}: got {tuple(got.shape)} {got.dtype}, "
                                         f"want {tuple(expected.shape)} {expected.dtype}"}
        for before, after in zip(inputs, new_inputs):
            if isinstance(before, torch.Tensor) and not torch.equal(before, after):
                return {"ok": False, "error": f"seed {seed}: ModelNew modified its inputs"}
        err = (got - expected).abs().max().item() if got.numel() else 0.0
        max_err = max(max_err, err)
        if not torch.allclose(got, expected, atol=job["atol"], rtol=job["rtol"]):
            return {"ok": False, "error": f"seed {seed}: mismatch, max abs err {err:.3g}"}
    return {"ok": True, "max_abs_err": max_err}

jobs = json.load(sys.stdin)
for job in jobs:
    fd, path = tempfile.mkstemp(suffix=".json")
    os.close(fd)
    start = time.monotonic()
    pid = os.fork()
    if pid == 0:
        try:
            result = run_one(job)
        except BaseException:
            result = {"ok": False, "error": traceback.format_exc(limit=4)}
        with open(path, "w") as f:
            json.dump(result, f)
        os._exit(0)
    deadline = start + job["timeout_s"]
    while True:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            break
        if time.monotonic() > deadline:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
            status = None
            break
        time.sleep(0.01)
    try:
        with open(path) as f:
            result = json.load(f)
    except (OSError, ValueError):
        result = {"ok": False, "error": "timed out" if status is None else f"child died (status {status})"}
    os.unlink(path)
    result["id"] = job["id"]
    result["seconds"] = round(time.monotonic() - start, 3)
    print(json.dumps(result), flush=True)
'''

SOLUTIONS = list_solutions()

# Calls that would do the compute outside our Triton kernels (allocation and layout are fine).
_TORCH_ALLOWED = {"empty", "empty_like", "empty_strided", "tensor", "device", "float32", "int64", "int32"}
_TENSOR_COMPUTE_METHODS = {
    "sum", "mean", "max", "min", "amax", "amin", "matmul", "mm", "bmm", "relu", "sigmoid", "tanh", "exp",
    "log", "softmax", "log_softmax", "pow", "sqrt", "rsqrt", "norm", "cumsum", "clamp", "add", "mul", "sub",
    "div", "abs", "var", "std", "gelu", "prod", "argmax", "argmin", "addmm", "baddbmm", "einsum", "conv2d",
}


def forward_path_violations(source: str) -> list[str]:
    """torch compute calls inside ModelNew (our solutions must leave the compute to kernels)."""
    tree = ast.parse(source)
    model_new = next((n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == "ModelNew"), None)
    if model_new is None:
        return ["no ModelNew class"]
    found = []
    for method in (n for n in model_new.body if isinstance(n, ast.FunctionDef) and n.name != "__init__"):
        for node in ast.walk(method):
            if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
                continue
            owner, name = node.func.value, node.func.attr
            owner_name = owner.id if isinstance(owner, ast.Name) else None
            if owner_name in {"torch", "F"} and name not in _TORCH_ALLOWED:
                found.append(f"{owner_name}.{name} at line {node.lineno}")
            elif owner_name not in {"torch", "F", "triton", "tl", "math"} and name in _TENSOR_COMPUTE_METHODS:
                found.append(f".{name}() at line {node.lineno}")
    jitted = [
        n.name for n in tree.body if isinstance(n, ast.FunctionDef)
        and any("jit" in ast.unparse(d) for d in n.decorator_list)
    ]
    if not jitted:
        found.append("no @triton.jit kernel")
    return found


@pytest.fixture(scope="module")
def solution_results() -> dict[str, dict]:
    jobs = []
    for problem_id, path in SOLUTIONS:
        problem = get_problem(problem_id)
        jobs.append({
            "id": problem_id, "problem_source": problem.source_for("small"),
            "solution_source": path.read_text(), "seeds": list(SEEDS), "atol": ATOL, "rtol": RTOL,
            "timeout_s": PER_SOLUTION_TIMEOUT_S,
        })
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-c", _FORK_RUNNER], input=json.dumps(jobs), capture_output=True, text=True,
        env=env, timeout=PER_SOLUTION_TIMEOUT_S * len(jobs) + 60,
    )
    results = {}
    for line in proc.stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            results[result["id"]] = result
    slowest = sorted(results.values(), key=lambda r: -r["seconds"])[:5]
    print(f"\n{len(results)} solutions checked in {time.monotonic() - start:.1f} s; slowest: "
          + ", ".join(f"{r['id']} {r['seconds']:.1f}s" for r in slowest))
    if proc.returncode != 0:
        print(proc.stderr[-3000:])
    return results


def test_enough_solutions_of_levels_1_and_2():
    levels = [pid.split("/")[0] for pid, _ in SOLUTIONS]
    assert levels.count("L1") + levels.count("L2") >= 12
    assert levels.count("L2") >= 1


@pytest.mark.parametrize("problem_id,path", SOLUTIONS, ids=[p.stem for _, p in SOLUTIONS])
def test_solution_does_its_compute_in_triton(problem_id: str, path: Path):
    assert forward_path_violations(path.read_text()) == []


@pytest.mark.parametrize("problem_id,path", SOLUTIONS, ids=[p.stem for _, p in SOLUTIONS])
def test_solution_matches_reference(problem_id: str, path: Path, solution_results: dict[str, dict]):
    result = solution_results.get(problem_id)
    assert result is not None, f"{problem_id}: the runner returned no result"
    assert result["ok"], f"{problem_id} ({path.name}): {result.get('error')}"


def test_checker_rejects_a_wrong_solution(tmp_path):
    """The harness above must be able to fail: a ReLU 'solution' that computes x * 0.5."""
    problem = get_problem("L1/19")
    wrong = (Path(__file__).parents[1] / "KernelBench/solutions/level1/19_ReLU.py").read_text()
    wrong = wrong.replace("tl.maximum(x, 0.0)", "x * 0.5")
    jobs = [{
        "id": "L1/19", "problem_source": problem.source_for("small"), "solution_source": wrong,
        "seeds": [0], "atol": ATOL, "rtol": RTOL, "timeout_s": PER_SOLUTION_TIMEOUT_S,
    }]
    proc = subprocess.run(
        [sys.executable, "-c", _FORK_RUNNER], input=json.dumps(jobs), capture_output=True, text=True,
        env={**os.environ, "TRITON_INTERPRET": "1"}, timeout=120,
    )
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["ok"] is False and "mismatch" in result["error"]


def test_static_rule_flags_torch_compute_in_forward():
    source = (
        "import torch\nimport triton\n\n@triton.jit\ndef k(x):\n    pass\n\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    )
    assert forward_path_violations(source) == ["torch.relu at line 10"]
