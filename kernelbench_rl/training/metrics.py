"""Per-step training metrics (computed on every scored sample, before constant groups are dropped)
and their TensorBoard writer.

Beside the rates and rewards: the groups by what they can teach (tinker-cookbook's `by_group/frac_mixed`,
`frac_all_good`, `frac_all_bad`: only mixed groups train), the tokens sampled and prompted, and each problem's
abstention rate (`abstain_rate/<problem>`: the share of its samples whose evaluation gave no verdict, infra,
unsupported, undiscriminating or too large; `abstain_rate` over the step)."""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from kernelbench_rl.metrics import geometric_mean
from kernelbench_rl.rewards.shaping import STAGE_RATE_METRIC, counts_as_correct, is_hack
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


def _succeeded(turn: Any, preset: str | None) -> bool:
    """Did the turn reach what its stage rewards (format, compile, correct; correct for the speed and kernrl presets)?"""
    rate = STAGE_RATE_METRIC.get(preset or "", "correct_rate")
    if rate == "format_rate":
        return bool(turn.result.format_ok)
    if rate == "compile_rate":
        return bool(turn.result.compiled)
    return counts_as_correct(turn.result)


def group_metrics(groups: Sequence[GroupRollout], samples: Sequence[SampleTurn], preset: str | None = None) -> dict[str, float]:
    """tinker-cookbook's by_group fractions over the step's (problem, turn) groups of scored samples: `frac_mixed`
    (returns differ: the groups that train), `frac_all_good` (all equal, every sample reached what the stage
    rewards), `frac_all_bad` (all equal, the rest). Samples left out of their group's baseline (infra, truncated
    and dropped, cut short) do not count."""
    by_unit: dict[tuple[str, int], list[SampleTurn]] = {}
    group_of = {group.problem.id: group for group in groups}  # a problem appears once in a step
    for sample in samples:
        if sample.return_value is None or sample.dropped_truncated or sample.dropped_cut_short:
            continue
        by_unit.setdefault((sample.problem_id, sample.turn), []).append(sample)
    if not by_unit:
        return {}
    mixed = good = 0
    for unit in by_unit.values():
        if not all(s.dropped_constant for s in unit):
            mixed += 1
            continue
        group = group_of.get(unit[0].problem_id)
        turns = [group.envs[s.sample_index].turns[s.turn] for s in unit] if group is not None else []
        good += bool(turns) and all(t.result is not None and _succeeded(t, preset) for t in turns)
    n = len(by_unit)
    return {"by_group/frac_mixed": mixed / n, "by_group/frac_all_good": good / n,
            "by_group/frac_all_bad": (n - mixed - good) / n, "by_group/num_groups": float(n)}


def abstention_metrics(groups: Sequence[GroupRollout]) -> dict[str, float]:
    """Each problem's share of evaluated turns with no verdict on the kernel (`abstain_rate/<problem>`), and the
    step's (`abstain_rate`)."""
    metrics: dict[str, float] = {}
    total = abstained = 0
    for group in groups:
        results = [t.result for env in group.envs for t in env.turns if t.result is not None]
        if not results:
            continue
        none = sum(r.error_category.is_ours for r in results)
        metrics[f"abstain_rate/{group.problem.id}"] = none / len(results)
        total, abstained = total + len(results), abstained + none
    if total:
        metrics["abstain_rate"] = abstained / total
    return metrics


def step_metrics(groups: Sequence[GroupRollout], samples: Sequence[SampleTurn],
                 preset: str | None = None) -> tuple[dict[str, float], list[float]]:
    """Scalar metrics of one step and the list of counted speedups (for the histogram). `preset`: the reward the
    step was scored with (what an all-good group reached)."""
    turns = [turn for group in groups for env in group.envs for turn in env.turns]
    scored = [s for s in samples if s.reward is not None]
    metrics: dict[str, float] = {}
    metrics.update(_stats([s.reward for s in scored], "reward_"))
    metrics.update(_rates(turns, ""))
    speedups = [t.result.speedup for t in turns
                if t.result is not None and t.result.speedup_counts and t.result.speedup is not None]
    # fast_p only where something was timed: on the CPU no speedup is measured, and 0 would read as "none faster".
    if any(t.result is not None and t.result.speedup is not None for t in turns):
        for bucket in SPEEDUP_BUCKETS:
            metrics[f"fast_{bucket:g}_rate"] = sum(s > bucket for s in speedups) / len(turns)
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
    metrics["prompt_tokens_mean"] = statistics.fmean(len(s.prompt_tokens) for s in samples) if samples else 0.0
    metrics["completion_tokens"] = float(sum(len(s.completion_tokens) for s in samples))
    metrics["prompt_tokens"] = float(sum(len(s.prompt_tokens) for s in samples))
    metrics.update(group_metrics(groups, samples, preset))
    metrics.update(abstention_metrics(groups))
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
