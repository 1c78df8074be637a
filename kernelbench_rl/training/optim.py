"""One optimizer step of RL: the batch in `num_substeps` minibatches, each a forward_backward + optim_step.

With one substep every datum is trained by the policy that sampled it (or the one a bounded
number of steps behind it, asynchronous training), so PPO's clipping acts only off-policy;
with more, each later minibatch is trained after the policy has moved, which is what the ratio
and its clip are for. Calls are pipelined as the cookbook does: the next minibatch is submitted
before the current result is read.

The sample/train KL (tinker-cookbook's estimators over completion tokens) compares the sampler's
logprobs with the trainer's, from the same forward pass that computes the loss: on-policy it
measures numerical mismatch only, off-policy also how far the policy moved since sampling.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import tinker
import torch


@dataclass
class TrainOutcome:
    loss: float | None = None  # summed over minibatches (Tinker's loss is a sum over tokens)
    metrics: dict[str, float] = field(default_factory=dict)


def adam_params(learning_rate: float, training: Any) -> tinker.AdamParams:
    """Adam with the configured betas and eps (the cookbook's 0.9, 0.95, 1e-8 by default), never the SDK's."""
    return tinker.AdamParams(learning_rate=learning_rate, beta1=training.adam_beta1, beta2=training.adam_beta2,
                             eps=training.adam_eps)


def train_step(training_client: Any, datums: Sequence[tinker.Datum], prompt_lengths: Sequence[int], training: Any,
               *, loss_fn_config: dict[str, Any] | None = None) -> TrainOutcome:
    """Train on `datums` (prompt_lengths: prompt tokens of each, to find its completion positions)."""
    from tinker_cookbook.utils.misc_utils import split_list

    if not datums:
        return TrainOutcome()
    params = adam_params(training.learning_rate, training)
    order = list(range(len(datums)))
    batches = split_list(order, min(training.num_substeps, len(order)))
    futures = []
    for batch in batches:  # submit all: the service runs them in order, the next one already queued
        fwd_bwd = training_client.forward_backward([datums[i] for i in batch], loss_fn=training.loss_fn,
                                                   loss_fn_config=loss_fn_config)
        futures.append((batch, fwd_bwd, training_client.optim_step(params)))
    loss_sum, have_loss = 0.0, False
    training_logprobs: dict[int, torch.Tensor] = {}
    for batch, fwd_bwd, optim in futures:
        output = result_of(fwd_bwd)
        result_of(optim)
        loss = _loss_of(output)
        if loss is not None:
            loss_sum, have_loss = loss_sum + loss, True
        for index, item in zip(batch, output.loss_fn_outputs, strict=True):
            training_logprobs[index] = item["logprobs"].to_torch().float().reshape(-1)
    metrics = sample_train_kl(datums, [training_logprobs[i] for i in order], prompt_lengths)
    metrics["optim/num_substeps"] = float(len(batches))
    return TrainOutcome(loss_sum if have_loss else None, metrics)


def sample_train_kl(datums: Sequence[tinker.Datum], training_logprobs: Sequence[torch.Tensor],
                    prompt_lengths: Sequence[int]) -> dict[str, float]:
    """tinker-cookbook's sample/train KL estimators over the completion tokens of each datum."""
    from tinker_cookbook.rl.metrics import compute_kl_sample_train

    masked = []
    for datum, prompt_length in zip(datums, prompt_lengths, strict=True):
        mask = torch.zeros(datum.model_input.length, dtype=torch.float32)
        mask[max(prompt_length - 1, 0):] = 1.0  # targets from the first completion token on
        masked.append(tinker.Datum(model_input=datum.model_input, loss_fn_inputs={
            **datum.loss_fn_inputs, "mask": tinker.TensorData.from_torch(mask)}))
    return compute_kl_sample_train(masked, list(training_logprobs))


def result_of(value: Any) -> Any:
    return value.result() if hasattr(value, "result") and callable(value.result) else value


def _loss_of(output: Any) -> float | None:
    metrics = getattr(output, "metrics", None) or {}
    for key in ("loss:sum", "loss:mean", "loss"):
        if key in metrics:
            return float(metrics[key])
    return None
