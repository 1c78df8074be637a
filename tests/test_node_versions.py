"""Every verdict says which card timed it and its share of the host's cores (`versions`); on the CPU, that it had none.

On a GPU the timed ones also say where their baseline was timed (`versions["baseline_gpu"]`, tests/test_node_baselines.py
for the rule); the GPU half of this is `bash bench/device_suite.sh node`'s per-card report."""

from __future__ import annotations

from kernelbench_rl.evaluation import host_share
from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings
from kernelbench_rl.problems import list_solutions


def test_a_verdict_names_its_card_and_cores(monkeypatch):
    monkeypatch.delenv(host_share.HOST_SHARE_ENV, raising=False)
    problem_id, path = next((pid, p) for pid, p in list_solutions() if pid == "L1/19")
    settings = EvalSettings(device="cpu", timeout_s=60)
    with Evaluator(settings, static_checks=False) as evaluator:
        result = evaluator.evaluate([EvalRequest(problem_id, path.read_text(), settings)])[0]
    assert result.correct, result.error_message
    assert result.versions["gpu"] == "none: the CPU"
    assert result.versions["cores"].startswith("share 1 of 1: ")
    assert "baseline_gpu" not in result.versions  # nothing timed on the CPU
