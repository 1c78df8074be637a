"""The throughput benchmark offline: every mutant of its mix exists, still parses and really differs from its solution;
a CPU run judges each candidate and reports our pool alone; the counts its flags take (levels, GPUs) are read once each
and bad ones are one sentence."""

from __future__ import annotations

import ast
import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO_ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO_ROOT / "bench"))

import eval_scaling  # noqa: E402
import harness  # noqa: E402
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


def test_a_cpu_run_of_the_mix_judges_each_candidate_and_reports_our_pool_alone(tmp_path: Path) -> None:
    out, logs = tmp_path / "throughput.json", tmp_path / "worker_logs.txt"
    done = subprocess.run([sys.executable, str(REPO_ROOT / "bench" / "eval_throughput.py"), "--device", "cpu", "--limit",
                           "2", "--out", str(out), "--worker-logs", str(logs)],
                          capture_output=True, text=True, timeout=600, cwd=REPO_ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    data = json.loads(out.read_text())
    assert sorted(v["label"] for v in data["per_candidate"]["ours"]) == ["L1/19/correct", "L1/19/wrong_constant"]
    assert list(data["per_candidate"]) == ["ours"] and "naive" not in data
    ours = data["ours"]
    assert ours["candidates"] == 2 and ours["per_minute"] > 0
    assert ours["agreement"] == {"judged": 2, "right": 2, "wrong_labels": [], "faults_rejected": 0, "faults": 0}
    assert ours["latency_overhead_steady_mean_s"] is not None and ours["latency_overhead_steady_max_s"] is not None
    assert f"wrote {out}" in done.stdout
    assert "==== " in logs.read_text()  # the workers' log tails, appended at the pool's close


def test_counts_are_read_once_each_in_order_and_bad_ones_are_one_sentence() -> None:
    assert harness.parse_levels("2, 1,2") == [1, 2]
    assert eval_scaling.parse_gpus("4,2", workers=2) == [1, 2, 4] and eval_scaling.parse_gpus(None, workers=4) == [1, 4]
    for bad in ("0", "1,x", ",", "-1"):
        with pytest.raises(harness.BadInput, match=r"^--gpus takes numbers of 1 or more separated by commas"):
            eval_scaling.parse_gpus(bad, workers=2)
    with pytest.raises(harness.BadInput, match=r"^--levels takes numbers"):
        harness.parse_levels("")
