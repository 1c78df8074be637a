"""Integrity of the RL data path: nothing the loss needs is ever made up."""

from __future__ import annotations

import numpy as np
import pytest
from tinker import types

from kernelbench_rl.envs import EnvSpec
from kernelbench_rl.envs.kernel_env import EnvGroupBuilder
from kernelbench_rl.policy.tiny import load_tokenizer
from kernelbench_rl.problems import get_problem
from kernelbench_rl.training.grpo import SampleTurn, sample_to_datum
from kernelbench_rl.training.rollouts import MissingLogprobsError, PromptRenderer, RolloutRunner


def _sequence(tokens: list[int], logprobs: list[float] | None) -> types.SampledSequence:
    return types.SampledSequence(
        stop_reason="stop", sequence_id="s0", tokens_np=np.asarray(tokens, dtype=np.int32),
        logprobs_np=None if logprobs is None else np.asarray(logprobs, dtype=np.float32))


@pytest.mark.parametrize("logprobs", [None, [-0.5], []])
def test_missing_or_short_sampler_logprobs_raise(logprobs: list[float] | None) -> None:
    runner = RolloutRunner(sampling_client=None, renderer=PromptRenderer(load_tokenizer("local:tiny")),
                           evaluate=lambda ids, responses: [])
    (env,) = EnvGroupBuilder(get_problem("L1/19"), 1, EnvSpec())()
    with pytest.raises(MissingLogprobsError, match="logprob"):
        runner._record(env, "p", [1, 2], _sequence([5, 6, 7], logprobs))
    assert env.turns == []  # nothing half-recorded


def test_a_sample_with_short_logprobs_never_becomes_a_datum() -> None:
    sample = SampleTurn(problem_id="L1/19", level=1, sample_index=0, turn=0, prompt_tokens=[1, 2, 3],
                        completion_tokens=[4, 5, 6], logprobs=[-0.1, -0.2], reward=1.0, advantage=0.5,
                        trainable=True)
    with pytest.raises(MissingLogprobsError, match="2 sampler logprobs for 3 completion tokens"):
        sample_to_datum(sample)
