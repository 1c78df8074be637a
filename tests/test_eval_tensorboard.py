"""A checkpoint's evaluation lands in TensorBoard beside its run's training curves, at the checkpoint's step."""

from __future__ import annotations

import shutil

import pytest

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
from kernelbench_rl.problems.loaders import BUNDLED_ROOT
from kernelbench_rl.store import Store
from kernelbench_rl.training import run_training
from kernelbench_rl.training.checkpoint_eval import evaluate_checkpoint


def judged(problem_ids: list[str], responses: list[str]) -> list[EvalResult]:
    """Every first sample of a problem right, every other compiled and wrong."""
    out = []
    for index, pid in enumerate(problem_ids):
        right = index % 2 == 0
        out.append(EvalResult(problem_id=pid, candidate_sha256="0" * 64, backend="triton", precision="fp32",
                              device_kind="cpu", format_ok=True, compiled=True, correct=right,
                              error_category=ErrorCategory.OK if right else ErrorCategory.MISMATCH))
    return out


def test_holdout_metrics_are_tensorboard_scalars_at_the_checkpoints_step(tmp_path):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    root = tmp_path / "KernelBench"
    (root / "level1").mkdir(parents=True)
    for name in ("19_ReLU.py", "20_LeakyReLU.py"):
        shutil.copy(BUNDLED_ROOT / "level1" / name, root / "level1" / name)
    cfg = load_config("default", [
        f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "run_id=tb", "policy.backend=local",
        "policy.base_model=local:tiny", "policy.lora_rank=4", "training.steps=2", "training.batch_problems=1",
        "sampling.group_size=2", "sampling.max_tokens=8", "training.checkpoint_every=1", "rag.enabled=false",
        f"problems.kernelbench_root={root}", "problems.levels=[1]", "problems.holdout_fraction=0",
        "eval.device=cpu", "eval.size=small", "curriculum.enabled=false"])
    run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=judged)
    evaluate_checkpoint(build_run_parts(cfg, policy_beside=True), checkpoint="latest", samples_per_problem=2, split="all", ks=(1, 2), evaluate_fn=judged)

    events = EventAccumulator(str(tmp_path / "logs" / "tb" / "tensorboard" / "eval")).Reload()
    scalars = set(events.Tags()["scalars"])
    assert {"all/correct_rate", "all/compile_rate", "all/pass@1", "all/pass@2", "all/L1/correct_rate"} <= scalars
    (point,) = events.Scalars("all/correct_rate")
    assert point.step == 1 and point.value == pytest.approx(0.5)  # the newest checkpoint's step, half right
    assert "all/geomean_speedup" not in scalars  # nothing timed on the CPU: no made-up zero

    # TensorBoard that cannot be written (its folder is a file) costs the figures, never the rows.
    (tmp_path / "logs" / "tb" / "tensorboard" / "eval-base").write_text("not a folder")
    with pytest.warns(UserWarning, match="TensorBoard figures were not written"):
        report = evaluate_checkpoint(build_run_parts(cfg, policy_beside=True), checkpoint="base", samples_per_problem=2,
                                     split="all", ks=(1, 2), evaluate_fn=judged)
    rows = Store(tmp_path / "kb.duckdb").fetchall("SELECT checkpoint, num_problems FROM eval_reports WHERE eval_id = ?",
                                                  [report.eval_id])
    assert rows and {r[0] for r in rows} == {"base"} and all(r[1] == 2 for r in rows)
