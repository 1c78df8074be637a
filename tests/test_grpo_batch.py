"""bench/grpo_batch.py on the CPU at small sizes, on the bundled problems: the machinery, never a speed.

The script runs in a subprocess (as on the GPU machine): the bare loop in a process of its own, then two problems x
two distinct samples through one warm pool.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "grpo_batch.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("grpo_batch", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


grpo = _load_script()


def run_script(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    for name in ("KERNELBENCH_ROOT", "KBRL_PROBLEMS_ROOT"):  # the bundled set
        env.pop(name, None)
    env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)


def test_samples_are_distinct_candidates_of_the_reference():
    from kernelbench_rl.problems import get_problem

    problems = [get_problem("L1/19"), get_problem("L2/76")]
    candidates = grpo.batch_candidates(problems, 3, "small")
    assert [c.label for c in candidates] == ["L1/19/s0", "L2/76/s0", "L1/19/s1", "L2/76/s1", "L1/19/s2", "L2/76/s2"]
    assert len({c.source for c in candidates}) == 6  # no cache or twin check can merge two samples
    for c in candidates:
        assert "class ModelNew(" in c.source and c.source.endswith(f"# sample {c.label[-1]}\n")
        code = c.source.rsplit("# sample", 1)[0]
        assert code.rstrip("\n") == candidates[0 if c.problem_id == "L1/19" else 1].source.rsplit("# sample", 1)[0].rstrip("\n")


def test_gpu_floor_counts_every_call_of_correct_candidates_and_one_baseline_a_problem():
    settings = {"warmup_trials": 3, "timing_trials": 50}
    records = [
        {"problem_id": "L1/1", "correct": True, "runtime_ms": 2.0, "trials_total": 3, "baseline_ms": 2.0},
        {"problem_id": "L1/1", "correct": True, "runtime_ms": 2.0, "trials_total": 5, "baseline_ms": 2.0},
        {"problem_id": "L1/2", "correct": False, "runtime_ms": None, "trials_total": 3, "baseline_ms": 4.0},
    ]
    floor = grpo.gpu_floor(records, settings)
    assert floor["candidates_s"] == pytest.approx(2.0 * (56 + 58) / 1000)
    assert floor["baselines_s"] == pytest.approx((2.0 + 4.0) * 53 / 1000)
    assert floor["total_s"] == pytest.approx(floor["candidates_s"] + floor["baselines_s"], abs=1e-3)
    assert floor["problems_with_baseline"] == 2


def test_phase_breakdown_sums_and_takes_medians_with_missing_keys_as_zero():
    records = [{"phase_seconds": {"compile": 1.0, "timing": 2.0}}, {"phase_seconds": {"compile": 3.0}},
               {"phase_seconds": {"compile": 2.0, "timing": 4.0}}]
    out = grpo.phase_breakdown(records)
    assert out["summed_s"] == {"compile": 6.0, "timing": 6.0}
    assert out["median_per_candidate_s"] == {"compile": 2.0, "timing": 2.0}


def test_timing_ways_count_pairing_refreshes_and_where_baselines_were_timed():
    records = [
        {"problem_id": "L1/1", "versions": {"timing": "paired: the reference timed beside the kernel", "baseline_timed_in": "child"}},
        {"problem_id": "L1/1", "versions": {"baseline_timed_in": "child", "baseline_refreshed": "the reference's side"}},
        {"problem_id": "L1/4", "versions": {"baseline_timed_in": "worker", "timing": "solo"}},
        {"problem_id": "L1/9", "versions": {}},
    ]
    ways = grpo.timing_ways(records)
    assert ways == {"paired": 1, "baseline_refreshed": 1, "baselines_timed_in": {"child": ["L1/1"], "worker": ["L1/4"]}}


def test_cpu_dry_run_on_bundled_problems(tmp_path):
    out = tmp_path / "grpo.json"
    proc = run_script("--device", "cpu", "--size", "small", "--problems", "L1/19,L2/76", "--samples", "2",
                      "--correctness-trials", "2", "--timeout", "90", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "correctness 2" in proc.stdout and "warm-up 3" in proc.stdout  # the trial counts are printed
    data = json.loads(out.read_text())
    assert data["mode"] == "grpo-batch" and data["problems"] == {"L1": ["L1/19"], "L2": ["L2/76"]}
    assert data["settings"]["samples_per_problem"] == 2 and data["settings"]["static_checks"] is False
    for name, pid in (("L1", "L1/19"), ("L2", "L2/76")):
        level = data["warm"]["levels"][name]
        assert level["planned"] == level["finished"] == level["correct"] == 2 and level["all_correct"]
        assert level["not_correct"] == [] and level["cached"] == 0 and not level["budget_cut"]
        assert level["wall_s"] > 0 and level["candidates_per_min"] > 0
        assert level["gpu_floor"]["total_s"] == 0  # nothing timed on the CPU
        assert level["speedup"]["count"] == 0
        assert level["timing_ways"] == {"paired": 0, "baseline_refreshed": 0, "baselines_timed_in": {}}  # the CPU times nothing
        assert "worker_total" in level["phases"]["summed_s"] and "worker_total" in level["phases"]["median_per_candidate_s"]
        assert len(level["slowest"]) == 2 and all("phase_seconds" in s for s in level["slowest"])
        records = data["warm"]["per_candidate"][name]
        assert sorted(r["label"] for r in records) == [f"{pid}/s0", f"{pid}/s1"]
        assert all(r["correct"] and r["category"] == "ok" and not r["cached"] for r in records)
    assert len(data["warm"]["pools"]) == 1  # both levels on one pool
    bare = data["mandated"]  # the rules' work done bare, in a process of its own, before the warm batch
    assert bare["status"] == "done" and bare["mode"] == "mandated-floor"
    for name, pid in (("L1", "L1/19"), ("L2", "L2/76")):
        rows = bare["levels"][name]["problems"]
        assert [r["problem_id"] for r in rows] == [pid] and rows[0]["samples"] == 2 and rows[0]["wrong"] == []
        assert bare["levels"][name]["complete"] and bare["levels"][name]["bare_wall_s"] > 0
        assert data["warm"]["levels"][name]["mandated"]["wall_over_bare"] > 0


def test_a_level_gets_its_own_budget_and_no_more_than_the_run_has_left():
    args = argparse.Namespace(warm_budget_s=120.0, total_budget_s=None, script_start=time.perf_counter())
    assert grpo.level_budget(args) == 120.0
    args.total_budget_s = 60.0
    assert 50.0 < grpo.level_budget(args) <= 60.0
    args.script_start -= 100.0  # the run's budget spent: a second, as harness.left_of gives at the least
    assert grpo.level_budget(args) == 1.0
    args.warm_budget_s = args.total_budget_s = None
    assert grpo.level_budget(args) is None


def test_bad_input_exits_2_with_one_sentence():
    proc = run_script("--device", "cpu", "--size", "small", "--problems", "L1/999", timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "No problem L1/999" in proc.stderr


def test_level_summary_carries_the_bare_loop():
    mandated = {"levels": {"L1": {"bare_wall_s": 32.0, "bare_over_floor": 1.46, "complete": True}}}
    summary = grpo.with_mandated({"wall_s": 64.0, "finished": 64, "wall_per_candidate_s": 1.0}, mandated, "L1")
    assert summary["mandated"] == {"bare_wall_s": 32.0, "bare_over_floor": 1.46, "complete": True, "wall_over_bare": 2.0}
    assert grpo.with_mandated({"wall_s": 64.0}, {"status": "skipped"}, "L1")["mandated"]["wall_over_bare"] is None


def _bare_module():
    spec = importlib.util.spec_from_file_location("mandated_floor", REPO / "bench" / "mandated_floor.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class _Problem:
    """A problem as the loaders give it: an id, a name and its source."""

    def __init__(self, problem_id: str, source: str) -> None:
        self.id, self.name, self._source = problem_id, problem_id, source

    def source_for(self, size: str) -> str:
        return self._source


_PROBLEM = """
import torch
import torch.nn as nn


BUILT = [0]


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        BUILT[0] += 1
        self.number = BUILT[0]

    def forward(self, x):
        return torch.relu(x){extra}


def get_inputs():
    return [torch.randn(64, 32)]


def get_init_inputs():
    return []
"""


def test_bare_loop_compares_every_sample_against_the_reference(tmp_path):
    bare = _bare_module()
    settings = {"correctness_trials": 2, "warmup_trials": 1, "timing_trials": 3}
    same = bare.run_problem(_Problem("L1/900", _PROBLEM.format(extra="")), "small", 3, settings, "cpu", str(tmp_path))
    assert same["wrong"] == [] and same["samples"] == 3 and same["fresh_buffers"]
    assert set(same["parts_s"]) == {"build", "correctness", "timed", "baseline"} and same["wall_s"] > 0
    # A model whose outputs depend on which instance it is: each sample fails against the reference on each seed.
    noisy = bare.run_problem(_Problem("L1/901", _PROBLEM.format(extra=" + self.number")), "small", 2, settings,
                             "cpu", str(tmp_path))
    assert len(noisy["wrong"]) == 2 * 2 and all(w.startswith(("s0:", "s1:")) for w in noisy["wrong"])
