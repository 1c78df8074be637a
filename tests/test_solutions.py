"""Our bundled Triton solutions are correct against their references (CPU, Triton interpreter).

Each solution runs in its own process with TRITON_INTERPRET=1 set before triton is imported.
Importing torch and triton costs ~2.5 s per process on CI's 2 cores, so one helper process
imports them once (with the interpreter switched on) and forks a fresh child per solution: every
solution still gets its own process and module namespace, and a crash or hang ends only its child.
Models are built like KernelBench's harness does: Model(*init) and ModelNew(*init) each right
after torch.manual_seed(seed), fed clones of the same inputs, compared with torch.allclose at
the fp32 tolerance (integer and boolean outputs exactly; a tuple output by output), over two seeds.

A second check, with the interpreter off, turns every kernel launch into an ahead-of-time compile
for an H100 (sm_90, through ptxas): the interpreter accepts code a GPU rejects (a loop-carried
value whose type changes, for one), and these solutions are the real evaluator's positives.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from kernelbench_rl.problems import SOLUTIONS_ROOT, get_problem, list_solutions

SEEDS = (42, 7)
ATOL = RTOL = 1e-4
PER_SOLUTION_TIMEOUT_S = 60
H100_MAX_SHARED_BYTES = 227 * 1024  # per block, with the opt-in carve-out
WRONG_VALUES_ID = "negative/wrong-values"
INVALID_GPU_ID = "negative/invalid-gpu-kernel"

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
        # A tuple of tensors (kernrl's video problems) is compared output by output.
        expected = list(expected) if isinstance(expected, (tuple, list)) else [expected]
        got = list(got) if isinstance(got, (tuple, list)) else [got]
        if len(got) != len(expected) or not all(isinstance(g, torch.Tensor) for g in got):
            return {"ok": False, "error": f"ModelNew returned {[type(g).__name__ for g in got]}, "
                                         f"not {len(expected)} tensor(s)"}
        for g, e in zip(got, expected):
            if g.shape != e.shape or g.dtype != e.dtype:
                return {"ok": False, "error": f"seed {seed}: got {tuple(g.shape)} {g.dtype}, "
                                             f"want {tuple(e.shape)} {e.dtype}"}
        for before, after in zip(inputs, new_inputs):
            if isinstance(before, torch.Tensor) and not torch.equal(before, after):
                return {"ok": False, "error": f"seed {seed}: ModelNew modified its inputs"}
        for g, e in zip(got, expected):
            if not (e.is_floating_point() or e.is_complex()):  # integer and boolean outputs: exact
                if not torch.equal(g, e):
                    return {"ok": False, "error": f"seed {seed}: mismatch at {int((g != e).sum())} elements"}
                continue
            err = (g - e).abs().max().item() if g.numel() else 0.0
            max_err = max(max_err, err)
            if not torch.allclose(g, e, atol=job["atol"], rtol=job["rtol"]):
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

# Runs without TRITON_INTERPRET: every kernel launch is replaced by an ahead-of-time compile for an
# H100 (sm_90) target, so the GPU code path (typing, masks' shapes, constexprs, ptxas) is checked
# on a machine with no GPU. Arguments are typed from the values the solution passes.
_GPU_COMPILE_RUNNER = r'''
import importlib.util, json, os, sys, tempfile, time, traceback
assert not os.environ.get("TRITON_INTERPRET")
import torch
import triton
try:
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource
    from triton.runtime.jit import JITFunction
except ImportError as exc:  # another Triton layout: the test skips, saying why
    print(json.dumps({"id": "setup", "error": repr(exc)}), flush=True)
    sys.exit(0)

TARGET = GPUTarget("cuda", 90, 32)  # H100
POINTER_TYPES = {torch.float32: "*fp32", torch.float16: "*fp16", torch.bfloat16: "*bf16", torch.int64: "*i64",
                 torch.int32: "*i32", torch.bool: "*i1", torch.uint8: "*u8", torch.int8: "*i8"}
compiled = []

def compile_instead_of_launch(self, *args, grid, warmup, **kwargs):
    bound = dict(zip((p.name for p in self.params), args))
    bound.update(kwargs)
    signature, constexprs = {}, {}
    for param in self.params:
        value = bound[param.name] if param.name in bound else param.default
        if param.is_constexpr:
            signature[param.name] = "constexpr"
            constexprs[param.name] = value
        elif isinstance(value, torch.Tensor):
            signature[param.name] = POINTER_TYPES[value.dtype]
        elif isinstance(value, bool):
            signature[param.name] = "i1"
        elif isinstance(value, int):
            signature[param.name] = "i32" if -2**31 <= value < 2**31 else "i64"
        elif isinstance(value, float):
            signature[param.name] = "fp32"
        else:
            raise TypeError(f"{self.__name__}: cannot type argument {param.name}={value!r}")
    kernel = triton.compile(ASTSource(fn=self, signature=signature, constexprs=constexprs), target=TARGET)
    compiled.append({"kernel": self.__name__, "shared": kernel.metadata.shared})

JITFunction.run = compile_instead_of_launch
workdir = tempfile.mkdtemp()

for index, job in enumerate(json.load(sys.stdin)):
    compiled.clear()
    start = time.monotonic()
    try:
        ref = {"__name__": "reference"}
        exec(compile(job["problem_source"], "<reference>", "exec"), ref)
        # Compiled (non-interpreted) @triton.jit reads its source from a real file.
        path = os.path.join(workdir, f"solution_{index}.py")
        with open(path, "w") as f:
            f.write(job["solution_source"])
        spec = importlib.util.spec_from_file_location(f"solution_{index}", path)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        torch.manual_seed(0)
        inputs = ref["get_inputs"]()
        model = module.ModelNew(*ref["get_init_inputs"]())
        with torch.no_grad():
            model(*inputs)  # launches become compiles; the output is not looked at
        result = {"ok": bool(compiled), "kernels": list(compiled), "error": None if compiled else "no kernel launched"}
    except BaseException:
        result = {"ok": False, "kernels": list(compiled), "error": traceback.format_exc(limit=3)}
    result["id"] = job["id"]
    result["seconds"] = round(time.monotonic() - start, 2)
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


def _jobs(seeds: tuple[int, ...]) -> list[dict]:
    jobs = []
    for problem_id, path in SOLUTIONS:
        jobs.append({
            "id": problem_id, "problem_source": get_problem(problem_id).source_for("small"),
            "solution_source": path.read_text(), "seeds": list(seeds), "atol": ATOL, "rtol": RTOL,
            "timeout_s": PER_SOLUTION_TIMEOUT_S,
        })
    return jobs


def _negative_controls() -> list[dict]:
    """Broken variants of our solutions that the runners must reject (run with the real jobs)."""
    relu = (SOLUTIONS_ROOT / "level1" / "19_ReLU.py").read_text()
    softmax = (SOLUTIONS_ROOT / "level1" / "23_Softmax.py").read_text()
    controls = {
        # Wrong values: computes x * 0.5 instead of ReLU.
        WRONG_VALUES_ID: ("L1/19", relu.replace("tl.maximum(x, 0.0)", "x * 0.5")),
        # Right values in the interpreter, rejected by the GPU compiler: a loop-carried sum that
        # starts as a Python int and becomes fp32 inside the loop.
        INVALID_GPU_ID: ("L1/23", softmax.replace("row_sum = tl.sum(tl.zeros((BLOCK,), tl.float32), axis=0)", "row_sum = 0")),
    }
    jobs = []
    for control_id, (problem_id, text) in controls.items():
        assert text not in (relu, softmax), f"{control_id}: the edit no longer applies"
        jobs.append({
            "id": control_id, "problem_source": get_problem(problem_id).source_for("small"),
            "solution_source": text, "seeds": [0], "atol": ATOL, "rtol": RTOL, "timeout_s": PER_SOLUTION_TIMEOUT_S,
        })
    return jobs


def _start(code: str, env: dict[str, str], jobs: list[dict]) -> subprocess.Popen:
    """Start a runner and hand it its jobs at once, so several runners work side by side."""
    stderr = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=stderr,
        text=True, env=env,
    )
    proc.stdin.write(json.dumps(jobs))
    proc.stdin.close()
    proc.stderr_file = stderr  # type: ignore[attr-defined]
    return proc


def _collect(proc: subprocess.Popen, label: str) -> dict[str, dict]:
    """One JSON result per stdout line (results are small, so the pipe never fills up)."""
    stdout = proc.stdout.read()
    proc.wait(timeout=PER_SOLUTION_TIMEOUT_S * 2)
    results = {}
    for line in stdout.splitlines():
        if line.startswith("{"):
            result = json.loads(line)
            results[result.get("id", "setup")] = result
    if proc.returncode != 0:
        proc.stderr_file.seek(0)
        print(f"{label} runner exited {proc.returncode}: {proc.stderr_file.read()[-3000:]}")
    proc.stderr_file.close()
    return results


@pytest.fixture(scope="module")
def runner_results(tmp_path_factory) -> dict[str, dict[str, dict]]:
    """All runners at once, so both CI cores work: the interpreter run and two H100 compile runs."""
    jobs = _jobs(SEEDS) + _negative_controls()
    interp_env = {**os.environ, "TRITON_INTERPRET": "1"}
    compile_env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    # A fresh cache: every kernel really goes through the compiler, and ~/.triton stays clean.
    compile_env["TRITON_CACHE_DIR"] = str(tmp_path_factory.mktemp("triton_cache"))
    start = time.monotonic()
    # Compiling costs about twice the interpreter run, so its jobs are split over two processes.
    interp = _start(_FORK_RUNNER, interp_env, jobs)
    compilers = [_start(_GPU_COMPILE_RUNNER, compile_env, half) for half in (jobs[0::2], jobs[1::2])]
    results = {"interpret": _collect(interp, "interpreter"), "compile": {}}
    for proc in compilers:
        results["compile"].update(_collect(proc, "compile"))
    checked = [r for r in results["interpret"].values() if "seconds" in r and not r["id"].startswith("negative")]
    slowest = sorted(checked, key=lambda r: -r["seconds"])[:5]
    print(f"\n{len(checked)} solutions checked in {time.monotonic() - start:.1f} s; slowest in the interpreter: "
          + ", ".join(f"{r['id']} {r['seconds']:.1f}s" for r in slowest))
    return results


def test_enough_solutions_of_levels_1_and_2():
    levels = [pid.split("/")[0] for pid, _ in SOLUTIONS]
    assert levels.count("L1") + levels.count("L2") >= 12
    assert levels.count("L2") >= 1


@pytest.mark.parametrize("problem_id,path", SOLUTIONS, ids=[p.stem for _, p in SOLUTIONS])
def test_solution_does_its_compute_in_triton(problem_id: str, path: Path):
    assert forward_path_violations(path.read_text()) == []


@pytest.mark.parametrize("problem_id,path", SOLUTIONS, ids=[p.stem for _, p in SOLUTIONS])
def test_solution_matches_reference(problem_id: str, path: Path, runner_results: dict[str, dict[str, dict]]):
    result = runner_results["interpret"].get(problem_id)
    assert result is not None, f"{problem_id}: the runner returned no result"
    assert result["ok"], f"{problem_id} ({path.name}): {result.get('error')}"


@pytest.mark.parametrize("problem_id,path", SOLUTIONS, ids=[p.stem for _, p in SOLUTIONS])
def test_solution_compiles_for_h100(problem_id: str, path: Path, runner_results: dict[str, dict[str, dict]]):
    """Every kernel the solution launches compiles to an sm_90 cubin (ptxas included), no GPU needed."""
    setup = runner_results["compile"].get("setup")
    if setup is not None:
        pytest.skip(f"this Triton cannot compile for CUDA here: {setup['error']}")
    result = runner_results["compile"].get(problem_id)
    assert result is not None, f"{problem_id}: the compile runner returned no result"
    assert result["ok"], f"{problem_id} ({path.name}): {result.get('error')}"
    for kernel in result["kernels"]:
        assert kernel["shared"] <= H100_MAX_SHARED_BYTES, f"{kernel['kernel']} needs {kernel['shared']} B of shared memory"


def test_checker_rejects_a_wrong_solution(runner_results: dict[str, dict[str, dict]]):
    """The correctness run must be able to fail: a ReLU 'solution' that computes x * 0.5."""
    result = runner_results["interpret"][WRONG_VALUES_ID]
    assert result["ok"] is False and "mismatch" in result["error"]


def test_compile_check_rejects_what_only_the_interpreter_accepts(runner_results: dict[str, dict[str, dict]]):
    """The H100 compile check must be able to fail, and on code the interpreter runs correctly."""
    if "setup" in runner_results["compile"]:
        pytest.skip(f"this Triton cannot compile for CUDA here: {runner_results['compile']['setup']['error']}")
    assert runner_results["interpret"][INVALID_GPU_ID]["ok"] is True
    result = runner_results["compile"][INVALID_GPU_ID]
    assert result["ok"] is False and "Loop-carried variable row_sum" in result["error"], result["error"]


def test_static_rule_flags_torch_compute_in_forward():
    source = (
        "import torch\nimport triton\n\n@triton.jit\ndef k(x):\n    pass\n\n"
        "class ModelNew(torch.nn.Module):\n    def forward(self, x):\n        return torch.relu(x)\n"
    )
    assert forward_path_violations(source) == ["torch.relu at line 10"]

