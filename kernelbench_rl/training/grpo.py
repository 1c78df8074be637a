"""From finished groups to training data: scores, discounted returns, per-turn advantages, datums.

Each turn of each episode is its own training sample (Kevin-style): its return is its own score
plus the discounted scores of the turns after it, and its baseline comes from the other samples
of the same problem at the same turn index. Groups (problem, turn) whose returns are all equal
carry no signal and are dropped from the train batch, after metrics have seen them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import tinker
import torch

from kernelbench_rl.rewards.returns import discounted_returns, group_advantages, is_constant
from kernelbench_rl.rewards.shaping import clamp_truncated, score
from kernelbench_rl.training.rollouts import GroupRollout, MissingLogprobsError


@dataclass
class SampleTurn:
    """One (problem, sample, turn) of a step with everything the store and the trainer need."""

    problem_id: str
    level: int
    sample_index: int
    turn: int
    prompt_tokens: list[int]
    completion_tokens: list[int]
    logprobs: list[float]
    reward: float | None  # None: infra failure, not trainable
    return_value: float | None = None
    advantage: float = 0.0
    trainable: bool = False
    dropped_constant: bool = False
    truncated: bool = False  # cut at max_tokens (stop_reason "length")
    dropped_truncated: bool = False  # left out of the loss and the baseline (rewards.truncated=drop)
    dropped_cut_short: bool = False  # its episode ended on an infra failure after turn 0: no return is known


TRUNCATION_POLICIES = ("clamp", "reward", "drop", "zero_advantage", "keep")


def score_group(group: GroupRollout, preset: str, *, gamma: float, baseline: str, speedup_cap: float,
                truncated: str = "clamp", truncated_reward: float = 0.0) -> list[SampleTurn]:
    """Score every turn of a finished group and fill returns and advantages.

    A truncated turn (its completion hit max_tokens) is handled by `truncated`: `clamp` grades it and
    clamps the grade to the preset's floor (rewards.shaping.clamp_truncated: never above an honest
    failure); `drop` leaves it out of its turn's baseline and of the loss; `zero_advantage` keeps it
    in the baseline with no gradient of its own; `reward` scores it `truncated_reward` instead of its
    verdict (the config refuses a value above the floor); `keep` scores its verdict like any other
    turn (smoke runs whose max_tokens cuts every answer). Its score still counts in the returns of the turns before it
    (Kevin mode): that is what happened.
    """
    if truncated not in TRUNCATION_POLICIES:
        raise ValueError(f"unknown truncation policy {truncated!r}")
    samples: list[SampleTurn] = []
    by_turn: dict[int, list[SampleTurn]] = {}
    for sample_index, env in enumerate(group.envs):
        rewards_T: list[float] = []
        turns_T: list[SampleTurn] = []
        for turn in env.turns:
            assert turn.result is not None
            turn.score = score(turn.result, preset, speedup_cap=speedup_cap)
            cut = turn.stop_reason == "length"
            reward = turn.score.reward
            if cut and truncated == "clamp":
                reward = clamp_truncated(reward, preset)
            elif cut and truncated == "reward" and reward is not None:
                reward = truncated_reward
            sample = SampleTurn(problem_id=env.problem.id, level=env.problem.level, sample_index=sample_index,
                                turn=turn.index, prompt_tokens=turn.prompt_tokens,
                                completion_tokens=turn.completion_tokens, logprobs=turn.logprobs,
                                reward=reward, truncated=cut)
            samples.append(sample)
            if reward is not None:  # an infra turn ends the episode, so scored turns are a prefix
                rewards_T.append(reward)
                turns_T.append(sample)
        if turns_T and len(turns_T) < len(env.turns):
            # Cut short by an infra failure after turn 0: the earlier turns' returns would count the
            # rewards of the turns it never had as 0, so the whole episode leaves training.
            for sample in turns_T:
                sample.dropped_cut_short = True
            continue
        for sample, ret in zip(turns_T, discounted_returns(rewards_T, gamma), strict=True):
            sample.return_value = ret
            if sample.truncated and truncated == "drop":
                sample.dropped_truncated = True
                continue
            by_turn.setdefault(sample.turn, []).append(sample)
    for turn_samples in by_turn.values():
        returns_G = [s.return_value for s in turn_samples]
        if is_constant(returns_G) or len(turn_samples) < 2:
            for s in turn_samples:
                s.dropped_constant = True
            continue
        for s, advantage in zip(turn_samples, group_advantages(returns_G, baseline), strict=True):
            if s.truncated and truncated == "zero_advantage":
                continue  # in the others' baseline, no gradient of its own
            s.advantage = advantage
            s.trainable = bool(s.completion_tokens)
    return samples


def sample_to_datum(sample: SampleTurn) -> tinker.Datum:
    """A datum as the cookbook builds it: inputs shifted right, per-token sampler logprobs and advantages
    (zero on prompt positions, so only the completion is trained)."""
    prompt_T, completion_T = sample.prompt_tokens, sample.completion_tokens
    if not prompt_T:
        # The first target is predicted from the last prompt token: without one the shift is wrong.
        raise ValueError(f"Sample {sample.problem_id}#{sample.sample_index} turn {sample.turn} has an empty prompt.")
    tokens_T = prompt_T + completion_T
    n_prompt_targets = len(prompt_T) - 1
    if len(sample.logprobs) != len(completion_T):
        raise MissingLogprobsError(
            f"Sample {sample.problem_id}#{sample.sample_index} turn {sample.turn} has {len(sample.logprobs)} sampler "
            f"logprobs for {len(completion_T)} completion tokens; the loss needs exactly one per token.")
    sampled_T = list(sample.logprobs)
    logprobs_T = [0.0] * n_prompt_targets + sampled_T
    advantages_T = [0.0] * n_prompt_targets + [sample.advantage] * len(completion_T)
    return tinker.Datum(
        model_input=tinker.ModelInput.from_ints(tokens_T[:-1]),
        loss_fn_inputs={
            "target_tokens": tinker.TensorData.from_torch(torch.tensor(tokens_T[1:], dtype=torch.int64)),
            "logprobs": tinker.TensorData.from_torch(torch.tensor(logprobs_T, dtype=torch.float32)),
            "advantages": tinker.TensorData.from_torch(torch.tensor(advantages_T, dtype=torch.float32)),
        },
    )


def build_datums(samples_S: Sequence[SampleTurn]) -> list[tinker.Datum]:
    return [sample_to_datum(s) for s in samples_S if s.trainable]
