"""Per-step training metrics (computed on every scored sample, before constant groups are dropped)
and their TensorBoard writer."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kernelbench_rl.metrics import geometric_mean
from kernelbench_rl.rewards.shaping import counts_as_correct, is_hack
from kernelbench_rl.training.grpo import SampleTurn
from kernelbench_rl.training.rollouts import GroupRollout

SPEEDUP_BUCKETS: tuple[float, ...] = (0.5, 0.8, 1.0, 1.5, 2.0, 5.0)


def _stats(values: Sequence[float], prefix: str) -> dict[str, float]:
    if not values:
        return {}
    return {
        f"{prefix}mean": statistics.fmean(values),
        f"{prefix}std": statistics.pstdev(values) if len(values) > 1 else 0.0,
        f"{prefix}min": min(values),
        f"{prefix}max": max(values),
    }


def _rates(turns: Sequence[Any], prefix: str) -> dict[str, float]:
    evaluated = [t for t in turns if t.result is not None and t.score is not None and not t.score.infra]
    if not evaluated:
        return {}
    n = len(evaluated)
    return {
        f"{prefix}format_rate": sum(bool(t.result.format_ok) for t in evaluated) / n,
        f"{prefix}compile_rate": sum(bool(t.result.compiled) for t in evaluated) / n,
        f"{prefix}correct_rate": sum(counts_as_correct(t.result) for t in evaluated) / n,
        f"{prefix}hack_rate": sum(is_hack(t.result) for t in evaluated) / n,
    }


def step_metrics(groups: Sequence[GroupRollout], samples: Sequence[SampleTurn]) -> tuple[dict[str, float], list[float]]:
    """Scalar metrics of one step and the list of counted speedups (for the histogram)."""
    turns = [turn for group in groups for env in group.envs for turn in env.turns]
    scored = [s for s in samples if s.reward is not None]
    metrics: dict[str, float] = {}
    metrics.update(_stats([s.reward for s in scored], "reward_"))
    metrics.update(_rates(turns, ""))
    speedups = [t.result.speedup for t in turns
                if t.result is not None and t.result.speedup_counts and t.result.speedup is not None]
    for bucket in SPEEDUP_BUCKETS:
        metrics[f"fast_{bucket:g}_rate"] = (sum(s > bucket for s in speedups) / len(turns)) if turns else 0.0
    geomean = geometric_mean(speedups)
    if geomean is not None:
        metrics["speedup_geomean"] = geomean
    for level in sorted({s.level for s in scored}):
        metrics.update(_stats([s.reward for s in scored if s.level == level], f"level_{level}/reward_"))
        metrics.update(_rates([t for g in groups if g.problem.level == level for e in g.envs for t in e.turns],
                              f"level_{level}/"))
    turn_indices = sorted({s.turn for s in scored})
    if len(turn_indices) > 1 or (turn_indices and turn_indices[0] > 0):
        for index in turn_indices:
            metrics.update(_stats([s.reward for s in scored if s.turn == index], f"turn_{index}/reward_"))
            metrics.update(_rates([t for t in turns if t.index == index], f"turn_{index}/"))
    metrics["num_samples"] = float(len(samples))
    metrics["num_trained"] = float(sum(s.trainable for s in samples))
    metrics["num_dropped_constant"] = float(sum(s.dropped_constant for s in samples))
    metrics["num_infra_dropped"] = float(sum(s.reward is None for s in samples))
    metrics["num_cut_short_dropped"] = float(sum(s.dropped_cut_short for s in samples))
    # Completions cut at max_tokens, over every sampled turn: a rising rate means max_tokens is too
    # small for what the policy writes (or it loops); rewards.truncated says what training does with them.
    metrics["truncated_rate"] = (sum(t.stop_reason == "length" for t in turns) / len(turns)) if turns else 0.0
    metrics["num_truncated_dropped"] = float(sum(s.dropped_truncated for s in samples))
    metrics["infra_retries"] = float(sum(g.infra_retries_used for g in groups))
    metrics["completion_tokens_mean"] = statistics.fmean(len(s.completion_tokens) for s in samples) if samples else 0.0
    envs = [env for g in groups for env in g.envs]
    metrics["turns_mean"] = statistics.fmean(len(env.turns) for env in envs) if envs else 0.0
    metrics["budget_ended"] = float(sum(env.end_reason == "token_budget" for env in envs))
    return metrics, speedups


class TensorBoardLogger:
    """Scalars and speedup histograms under the run's log dir; a resumed run purges steps it redoes."""

    def __init__(self, log_dir: str | Path, purge_step: int | None = None) -> None:
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(log_dir), purge_step=purge_step)

    def log(self, step: int, metrics: dict[str, float], speedups: Sequence[float]) -> None:
        for key, value in metrics.items():
            if isinstance(value, (int, float)) and math.isfinite(value):
                self.writer.add_scalar(key, value, step)
        if speedups:
            self.writer.add_histogram("speedup", np.asarray(speedups), step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()
