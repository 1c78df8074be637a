"""The CPU's compute account (evaluation/sandbox/compute_account.py) on honest kernels and on work done elsewhere.

Runs in a subprocess with TRITON_INTERPRET=1 set before triton is imported (as the evaluator's children do), the
account hooked into the interpreter the way the child hooks it, each candidate's forward run once under it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelbench_rl.problems import list_solutions

REPO = Path(__file__).resolve().parents[1]

_RUNNER = r'''
import json, os, sys, tempfile
import torch
from kernelbench_rl.evaluation.sandbox import compute_account, interpreter, runtime
from kernelbench_rl.evaluation.source import kernels
from kernelbench_rl.evaluation.sandbox.outputs import plain_outputs
from kernelbench_rl.problems import get_problem
from triton.runtime.interpreter import InterpretedFunction

interpreter.install()
compute_account.install_interpreter_hooks()
original = InterpretedFunction.run

def run(self, *args, **kwargs):  # as the child's launch counter does
    if kwargs.get("warmup"):
        return original(self, *args, **kwargs)
    with compute_account.launch(self.fn.__name__, args, kwargs):
        return original(self, *args, **kwargs)

InterpretedFunction.run = run
for job in json.load(sys.stdin):
    folder = tempfile.mkdtemp()
    for name, text in (("p.py", get_problem(job["problem"]).source_for("small")), ("c.py", job["source"])):
        open(os.path.join(folder, name), "w").write(text)
    problem = runtime.load_module_from_file(os.path.join(folder, "p.py"), "p" + os.urandom(4).hex(), register=False)
    module = runtime.load_module_from_file(os.path.join(folder, "c.py"), "c" + os.urandom(4).hex(), register=False)
    model = runtime.build_model(module.ModelNew, problem, 1, "cpu", "fp32")
    inputs = runtime.make_inputs(problem, 2, "cpu", "fp32")
    with torch.no_grad(), compute_account.forward(model, inputs, module) as account:
        account.outputs_done(plain_outputs(model(*inputs)))
    verdict = compute_account.judge([account.report()], kernels.triton_kernel_names(job["source"]))
    print(json.dumps({"id": job["id"], "share": verdict.share, "foreign": verdict.foreign, "summary": verdict.summary}),
          flush=True)
'''


def _account(jobs: list[dict]) -> dict[str, dict]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-c", _RUNNER], input=json.dumps(jobs), capture_output=True, text=True,
                          env=env, cwd=REPO, timeout=1200)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(jobs), done.stderr[-3000:]
    return {row["id"]: row for row in rows}


def test_every_bundled_triton_solution_is_its_own_work():
    """No honest kernel may read as PyTorch's or NumPy's work: share 1.0, nothing foreign (false positives here
    would zero the reward of correct kernels)."""
    jobs = [{"id": pid, "problem": pid, "source": path.read_text()} for pid, path in list_solutions()
            if "load_inline" not in path.read_text()]
    assert len(jobs) >= 40
    unclean = [f"{pid}: {row['summary']}" for pid, row in _account(jobs).items()
               if row["foreign"] or row["share"] < 0.99]
    assert not unclean, "\n".join(unclean)


HEAD = '''import numpy as np
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def relu(x, out):
    relu_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
    return out


class Count(int):
    pass

'''


def _candidate(body: str) -> str:
    return HEAD + "\nclass ModelNew(nn.Module):\n    def forward(self, x):\n" + "".join(f"        {line}\n" for line in body.split(";"))


CASES = [
    # torch ops on what the kernel wrote, and copies of it: accounted for
    ("torch_reshapes_kernel_output", "out = relu(x, torch.empty_like(x)).reshape(-1).clone();return out.view(x.shape)", False),
    ("torch_op_then_kernel", "y = torch.zeros_like(x);y.copy_(x);return relu(y, torch.empty_like(x))", False),
    # the kernel's output changed afterwards by NumPy: foreign
    ("numpy_rewrites_kernel_output", "out = relu(x, torch.empty_like(x));np.asarray(out)[...] = 0.5;return out", True),
    # a kernel reading memory NumPy filled, and a torch copy of NumPy memory: foreign
    ("kernel_reads_numpy_memory", "h = torch.from_numpy(np.asarray(x).copy());return relu(h, torch.empty_like(x))", True),
    ("torch_copies_numpy_memory", "relu(x, torch.empty_like(x));return torch.from_numpy(np.maximum(np.asarray(x), 0)).clone()", True),
    # the kernel's input rewritten by NumPy before the launch (zeros, then NumPy's ReLU): foreign
    ("numpy_fills_accounted_buffer", "b = torch.zeros_like(x);np.maximum(np.asarray(x), 0, out=np.asarray(b));"
     "return relu(b, torch.empty_like(x))", True),
    # what PyTorch computed reaches the output, however little it is and whatever the share: foreign
    ("torch_computes_on_kernel_output", "out = relu(x, torch.empty_like(x));return out.clamp(min=0.0)", True),
    # torch compute during a launch (here its grid function), even one whose result the output never holds
    ("torch_inside_the_grid_function", "out = torch.empty_like(x);"
     "relu_kernel[lambda meta: (torch.relu(x).numel() // 256 + 1,)](x, out, x.numel(), BLOCK=256);return out", True),
    # ... or in a heuristic, which Triton runs before the launch proper
    ("torch_inside_a_heuristic", "out = torch.empty_like(x);"
     "triton.heuristics({'BLOCK': lambda args: 256 + 0 * torch.relu(args['x_ptr']).numel()})(relu_kernel)"
     "[(triton.cdiv(x.numel(), 256),)](x, out, x.numel());return out", True),
    # a Python number read out of what PyTorch computed (it can reach a kernel only as an argument)
    ("python_number_from_torch", "top = x.amax().item();return relu(x, torch.empty_like(x))", True),
    # a launch argument of the candidate's own class (the interpreter's exempt steps would run its methods)
    ("candidate_int_as_launch_argument", "out = torch.empty_like(x);"
     "relu_kernel[(triton.cdiv(x.numel(), 256),)](x, out, Count(x.numel()), BLOCK=256);return out", True),
]

# libdevice under the interpreter runs through this package's torch ops (interpreter.py), exempt from the account.
TANH = '''import torch
import torch.nn as nn
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def tanh_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, libdevice.tanh(tl.load(x_ptr + offs, mask=mask)), mask=mask)


class ModelNew(nn.Module):
    def forward(self, x):
        out = torch.empty_like(x)
        tanh_kernel[(triton.cdiv(x.numel(), 256),)](x, out, x.numel(), BLOCK=256)
        return out
'''


@pytest.fixture(scope="module")
def accounted() -> dict[str, dict]:
    jobs = [{"id": case, "problem": "L1/19", "source": _candidate(body)} for case, body, _ in CASES]
    return _account(jobs + [{"id": "libdevice_tanh", "problem": "L1/22", "source": TANH}])


@pytest.mark.parametrize(("case", "foreign"), [(case, foreign) for case, _body, foreign in CASES])
def test_foreign_exactly_where_the_work_is_not_the_kernels(accounted, case: str, foreign: bool):
    row = accounted[case]
    assert bool(row["foreign"]) is foreign, row["summary"]


def test_libdevice_under_the_interpreter_is_the_kernels_own_work(accounted):
    row = accounted["libdevice_tanh"]
    assert not row["foreign"] and row["share"] == 1.0, row["summary"]
