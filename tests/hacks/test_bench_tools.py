"""The benchmark's own tools, offline: the mutants really are wrong (and still parse), and the naive
KernelBench-style harness judges like one, including being fooled by the hacks it is there to show."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "bench"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from eval_throughput import FULL_MIX, MUTANTS, QUICK_MIX, build_mix  # noqa: E402
from hack_cases import CASES_BY_NAME  # noqa: E402
from naive_harness import NaiveHarness, NaiveSettings  # noqa: E402

from kernelbench_rl.problems import get_problem, load_solution  # noqa: E402


def test_every_mutant_of_the_full_mix_exists_parses_and_differs() -> None:
    skipped: list[str] = []
    candidates = build_mix(FULL_MIX, warn=skipped.append)
    assert not skipped, skipped
    assert len(candidates) >= 40
    for cand in candidates:
        ast.parse(cand.source)
        original = ast.unparse(ast.parse(load_solution(get_problem(cand.problem_id))))
        if cand.kind == "correct":
            assert cand.expected == "correct"
        else:
            assert ast.unparse(ast.parse(cand.source)) != original, cand.label
    assert {c.kind for c in candidates} == set(MUTANTS)
    assert {k for _, kinds in QUICK_MIX for k in kinds} >= {"correct", "wrong_constant", "raises", "hangs"}


def test_missing_bias_drops_only_the_loaded_bias_value() -> None:
    solution = load_solution(get_problem("L2/76"))
    mutant = MUTANTS["missing_bias"][0](solution)
    assert mutant is not None
    assert "bias_ptr" in mutant  # the pointer arithmetic is untouched
    assert "acc + bias" not in mutant.replace("[None, :]", "")


@pytest.fixture(scope="module")
def naive() -> NaiveHarness:
    return NaiveHarness(NaiveSettings(device="cpu", correctness_trials=2, timing_trials=1, warmup_trials=1,
                                      timeout_s=60.0))


def _naive_eval(naive: NaiveHarness, problem_id: str, source: str, label: str):
    problem = get_problem(problem_id)
    return naive.evaluate(problem.id, problem.source_for("small"), source, label=label)


def test_naive_harness_accepts_the_solution_and_rejects_a_wrong_constant(naive: NaiveHarness) -> None:
    solution = load_solution(get_problem("L1/19"))
    good = _naive_eval(naive, "L1/19", solution, "correct")
    assert good.compiled and good.correct and good.trials_passed == 2, good.error
    assert good.runtime_ms is not None and good.baseline_ms is not None
    bad = _naive_eval(naive, "L1/19", MUTANTS["wrong_constant"][0](solution), "wrong")
    assert bad.compiled and not bad.correct and "mismatch" in bad.error


def test_naive_harness_is_fooled_by_in_process_hacks(naive: NaiveHarness) -> None:
    """What our evaluator must do better: the same-process harness pays for these."""
    for name in ("fake_result_stdout", "patch_allclose", "inherit_model"):
        result = _naive_eval(naive, "L1/19", CASES_BY_NAME[name].source, name)
        assert result.correct, f"{name}: {result.error}"


def test_naive_harness_says_bad_input_in_one_sentence_and_exits_2(tmp_path: Path) -> None:
    import subprocess

    candidate = tmp_path / "kernel.py"
    candidate.write_text("class ModelNew:\n    pass\n")
    for args in (["--problem", "L1/999", "--candidate", str(candidate)], ["--problem", "L1/19"]):
        done = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "naive_harness.py"), "--device", "cpu", *args],
                              capture_output=True, text=True, timeout=120)
        lines = [line for line in done.stderr.splitlines() if line.strip()]
        assert done.returncode == 2 and len(lines) == 1 and lines[0].startswith("error: "), done.stderr
