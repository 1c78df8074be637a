"""The throughput benchmark's mix, offline: every mutant exists, still parses and really differs from its solution."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "bench"))

from eval_throughput import FULL_MIX, MUTANTS, QUICK_MIX, build_mix  # noqa: E402

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
