"""The bundled problems of levels 4-10 (kernrl's ids) and our Triton solutions to them.

Each bundled problem restates kernrl's problem of the same id (file name, Model signature,
inputs, real sizes) and adds KBRL_SMALL_SIZES for the CPU. Here: every level has one; each solution
passes the evaluator at small size on the CPU (Triton's interpreter; integer outputs compared
exactly, a broken cipher rejected); and each solution also matches kernrl's own problem file at the
same small sizes, which shows the restatement computes what kernrl's does.
"""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys

import pytest

from bundled_problems import KERNRL_LEVELS, KERNRL_PROBLEMS, REPO
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings
from kernelbench_rl.problems import BUNDLED_ROOT, get_problem, list_solutions
from kernelbench_rl.problems.model import declared_small_sizes

SETTINGS = EvalSettings(device="cpu", timeout_s=120)
SOLUTIONS = [(pid, path) for pid, path in list_solutions() if int(pid.split("/")[0][1:]) in KERNRL_LEVELS]


def _module_constants(source: str) -> set[str]:
    names = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign):
            names |= {n.id for t in node.targets for n in ast.walk(t) if isinstance(n, ast.Name)}
    return names


def test_every_kernrl_level_has_a_bundled_problem_with_a_solution():
    levels = {int(pid.split("/")[0][1:]) for pid, _ in SOLUTIONS}
    assert levels == set(KERNRL_LEVELS)
    for level in KERNRL_LEVELS:
        for problem_path in sorted((BUNDLED_ROOT / f"level{level}").glob("*.py")):
            assert (BUNDLED_ROOT / "solutions" / f"level{level}" / problem_path.name).is_file(), problem_path
            source = problem_path.read_text()
            assert "KBRL_SMALL_SIZES" in _module_constants(source), f"{problem_path.name} declares no CPU sizes"
            unknown = set(declared_small_sizes(source)) - _module_constants(source)
            assert not unknown, f"{problem_path.name}: KBRL_SMALL_SIZES names {unknown}, which the file does not define"


def test_bundled_problems_keep_kernrl_ids_and_sizes():
    """Same file name as kernrl's problem, and the same module constants at the same real values."""
    if not KERNRL_PROBLEMS.is_dir():
        pytest.skip(f"kernrl's problems are not at {KERNRL_PROBLEMS}")
    for _, solution_path in SOLUTIONS:
        level = solution_path.parent.name
        ours = (BUNDLED_ROOT / level / solution_path.name).read_text()
        theirs = KERNRL_PROBLEMS / level / solution_path.name
        assert theirs.is_file(), f"kernrl has no {level}/{solution_path.name}"
        ours_ns, theirs_ns = {}, {}
        exec(compile(ours, "ours", "exec"), ours_ns)
        exec(compile(theirs.read_text(), "theirs", "exec"), theirs_ns)
        for name in declared_small_sizes(ours):
            assert ours_ns[name] == theirs_ns[name], f"{solution_path.name}: {name} differs from kernrl's"
        assert ours_ns["get_init_inputs"]() == theirs_ns["get_init_inputs"](), solution_path.name


@pytest.fixture(scope="module")
def evaluator(shared_evaluator):
    problems = {pid: get_problem(pid) for pid, _ in SOLUTIONS}
    with shared_evaluator(SETTINGS, problems=problems) as ev:
        yield ev


def test_solutions_pass_the_evaluator_on_the_cpu(evaluator):
    results = evaluator.evaluate([EvalRequest(pid, path.read_text(), SETTINGS) for pid, path in SOLUTIONS])
    failures = [f"{r.problem_id}: {r.error_category.value}: {r.error_message}" for r in results if not r.correct]
    assert not failures, "\n".join(failures)
    assert all(r.trials_passed == r.trials_total >= SETTINGS.correctness_trials for r in results)


def test_evaluator_rejects_a_cipher_off_by_one_rotation(evaluator):
    """Integer outputs are compared exactly: a ChaCha20 whose last rotation is 8 bits instead of 7 fails."""
    pid, path = next((pid, path) for pid, path in SOLUTIONS if path.name == "5_ChaCha20.py")
    source = path.read_text()
    broken = source.replace("b = _rotl32(b ^ c, 7)", "b = _rotl32(b ^ c, 8)")
    assert broken != source
    result = evaluator.evaluate([EvalRequest(pid, broken, SETTINGS)])[0]
    assert result.error_category == ErrorCategory.MISMATCH and not result.correct, result.error_message


# Runs with TRITON_INTERPRET=1 set before triton is imported. Jobs (JSON) on stdin; one JSON line each.
_AGAINST_KERNRL = r'''
import json, sys
import torch
from kernelbench_rl.problems.model import rewrite_module_constants

def load(source, label):
    ns = {"__name__": label}
    exec(compile(source, "<" + label + ">", "exec"), ns)
    return ns

def as_list(out):
    return list(out) if isinstance(out, (tuple, list)) else [out]

for job in json.load(sys.stdin):
    reference = load(rewrite_module_constants(job["kernrl_source"], job["small_sizes"]), "kernrl")
    solution = load(job["solution_source"], "solution")
    error, worst = None, 0.0
    for seed in (0, 1):
        torch.manual_seed(seed)
        inputs, init = reference["get_inputs"](), reference["get_init_inputs"]()
        torch.manual_seed(seed)
        model = reference["Model"](*init)
        torch.manual_seed(seed)
        model_new = solution["ModelNew"](*init)
        with torch.no_grad():
            expected, got = as_list(model(*inputs)), as_list(model_new(*inputs))
        if len(got) != len(expected):
            error = f"{len(got)} outputs, want {len(expected)}"
        for e, g in zip(expected, got):
            if error:
                break
            if g.shape != e.shape or g.dtype != e.dtype:
                error = f"seed {seed}: got {tuple(g.shape)} {g.dtype}, want {tuple(e.shape)} {e.dtype}"
            elif not e.is_floating_point():
                if not torch.equal(g, e):
                    error = f"seed {seed}: {int((g != e).sum())} integer elements differ"
            else:
                worst = max(worst, (g - e).abs().max().item())
                if not torch.allclose(g, e, atol=1e-4, rtol=1e-4):
                    error = f"seed {seed}: max abs err {worst:.3g}"
    print(json.dumps({"id": job["id"], "error": error, "max_abs_err": worst}), flush=True)
'''


def test_solutions_match_kernrl_problem_files():
    """Our solutions against kernrl's own files at our small sizes: exact for integers, 1e-4 for floats."""
    if not KERNRL_PROBLEMS.is_dir():
        pytest.skip(f"kernrl's problems are not at {KERNRL_PROBLEMS}")
    jobs = []
    for pid, path in SOLUTIONS:
        ours = (BUNDLED_ROOT / path.parent.name / path.name).read_text()
        jobs.append({"id": pid, "solution_source": path.read_text(), "small_sizes": declared_small_sizes(ours),
                     "kernrl_source": (KERNRL_PROBLEMS / path.parent.name / path.name).read_text()})
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(REPO)}
    proc = subprocess.run([sys.executable, "-c", _AGAINST_KERNRL], input=json.dumps(jobs), capture_output=True,
                          text=True, env=env, timeout=300)
    results = {r["id"]: r for r in map(json.loads, proc.stdout.splitlines())}
    assert set(results) == {job["id"] for job in jobs}, proc.stderr[-3000:]
    failures = [f"{pid}: {r['error']}" for pid, r in results.items() if r["error"]]
    assert not failures, "\n".join(failures)


def test_bundled_kernrl_problems_pass_the_problem_audit():
    """The audit every bundled problem must pass (deterministic, seed-dependent, neither zeros nor a constant
    passes), on our level 4-10 problems: tuples output by output, integer outputs exactly."""
    from test_problem_audit import audit_problem

    for pid, _ in SOLUTIONS:
        report = audit_problem(get_problem(pid))
        assert report.findings == [], f"{pid}: " + "; ".join(report.findings)
