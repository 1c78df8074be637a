"""A baseline is timed once per problem, source, precision, GPU and size: whatever measured or stored it,
the evaluator hands it to every later request (a new pool included), and never across a change of any
part of that key. KernelBench's own harness re-times the reference for every candidate; on level 2 the
baseline was 40% of our device time (bench/results/kb_harness_h200.json)."""

from __future__ import annotations

from kernelbench_rl.evaluation import Evaluator
from kernelbench_rl.evaluation.result import EvalSettings
from kernelbench_rl.problems.loaders import get_problem
from kernelbench_rl.store.db import Store

H100 = "NVIDIA H100 80GB HBM3"


def _gpu_evaluator(**kwargs) -> Evaluator:
    evaluator = Evaluator(EvalSettings(device="cuda"), **kwargs)
    evaluator._hardware = H100  # as the started pool reports it; no pool is started here
    return evaluator


def test_a_baseline_one_evaluator_learnt_is_handed_to_a_fresh_one_without_a_store():
    problem = get_problem("L1/19")
    first = _gpu_evaluator()
    assert first._baseline_for(problem, first.settings) is None  # nothing known yet: the worker times it
    key = (problem.id, problem.sha256, "fp32", H100, first.settings.size)
    first.baselines[key] = {"eager_ms": 4.41, "eager_spread_ms": 0.01, "compile_ms": None}
    fresh = _gpu_evaluator()
    fresh.baselines.update(first.baselines)
    assert fresh._baseline_for(problem, fresh.settings)["eager_ms"] == 4.41
    # another GPU, precision or size is another baseline
    other = _gpu_evaluator()
    other.baselines.update(first.baselines)
    other._hardware = "NVIDIA H200"
    assert other._baseline_for(problem, other.settings) is None
    assert fresh._baseline_for(problem, EvalSettings(device="cuda", precision="fp16")) is None
    assert fresh._baseline_for(get_problem("L1/20"), fresh.settings) is None


def test_a_stored_baseline_is_read_once_and_remembered(tmp_path):
    problem = get_problem("L1/19")
    store = Store(tmp_path / "runs.duckdb")
    evaluator = _gpu_evaluator(store=store)
    store.upsert("baselines", [{"problem_id": problem.id, "source_sha256": problem.sha256, "precision": "fp32",
                                "hardware": H100, "size": evaluator.settings.size, "eager_ms": 2.5,
                                "eager_spread_ms": 0.02, "compile_ms": 1.9}])
    assert evaluator._baseline_for(problem, evaluator.settings)["eager_ms"] == 2.5
    (tmp_path / "runs.duckdb").unlink()  # the store gone: the evaluator still knows it
    assert evaluator._baseline_for(problem, evaluator.settings)["compile_ms"] == 1.9


def test_the_cpu_never_gets_a_baseline():
    problem = get_problem("L1/19")
    evaluator = Evaluator(EvalSettings(device="cpu"))
    evaluator._hardware = "cpu:x86_64"
    evaluator.baselines[(problem.id, problem.sha256, "fp32", "cpu:x86_64", evaluator.settings.size)] = {"eager_ms": 1.0}
    assert evaluator._baseline_for(problem, evaluator.settings) is None
