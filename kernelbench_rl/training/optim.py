"""One optimizer step of RL: the batch in `num_substeps` minibatches, each a forward_backward + optim_step.

With one substep every datum is trained by the policy that sampled it (or the one a bounded
number of steps behind it, asynchronous training), so PPO's clipping acts only off-policy;
with more, each later minibatch is trained after the policy has moved, which is what the ratio
and its clip are for. Calls are pipelined as the cookbook does: the next minibatch is submitted
before the current result is read.

The sample/train KL (tinker-cookbook's estimators over completion tokens) compares the sampler's
logprobs with the trainer's, from the same forward pass that computes the loss: on-policy it
measures numerical mismatch (and, on a sampler that returns the logprobs of a tempered or top-p
distribution, that distribution's distance from the model's own), off-policy also how far the
policy moved since sampling.

The cookbook's other controls come from the cookbook too: `incorporate_kl_penalty` (a KL penalty
against a reference policy, added to the advantages before the loss; `training.kl_penalty_coef`, off
by default; its discounted form is masked back to the completion, the cookbook's helper leaves the sums
on prompt positions), `compute_post_kl` (`training.compute_post_kl`: how far one step moved the policy
on its own batch, `optim/kl_pre_post_*`, measured from the trainer's own logprobs before the update, so
neither the sampler's temperature nor its lag enters it; `optim/kl_sample_post_*` is the cookbook's
original, from the sampler's logprobs), PPO's and CISPO's clip ranges (`training.ppo_clip_low/high`,
`training.cispo_clip_low/high`, passed as Tinker's `loss_fn_config`), and the optimizer's own metrics
(`grad_norm` on the local backend), kept as `optim/<name>`, averaged over the step's substeps.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import tinker
import torch


@dataclass
class TrainOutcome:
    loss: float | None = None  # summed over minibatches (Tinker's loss is a sum over tokens)
    metrics: dict[str, float] = field(default_factory=dict)
    # Each datum's per-target logprobs under the weights that computed its loss (before the update)
    training_logprobs: list[torch.Tensor] = field(default_factory=list)


def adam_params(learning_rate: float, training: Any) -> tinker.AdamParams:
    """Adam with the configured betas and eps (the cookbook's 0.9, 0.95, 1e-8 by default), never the SDK's."""
    return tinker.AdamParams(learning_rate=learning_rate, beta1=training.adam_beta1, beta2=training.adam_beta2,
                             eps=training.adam_eps)


def loss_config(training: Any, loss_fn: str | None = None) -> dict[str, Any] | None:
    """Tinker's loss_fn_config for the loss (`loss_fn`, else training.loss_fn): PPO's or CISPO's clip range; nothing
    for importance sampling."""
    loss_fn = loss_fn or training.loss_fn
    if loss_fn == "ppo":
        return {"clip_low_threshold": float(training.ppo_clip_low), "clip_high_threshold": float(training.ppo_clip_high)}
    if loss_fn == "cispo":
        return {"clip_low_threshold": float(training.cispo_clip_low), "clip_high_threshold": float(training.cispo_clip_high)}
    return None


def resolve_loss_fn(loss_fn: str, *, tempered: bool, temperature: float, top_p: float) -> str:
    """training.loss_fn=auto: importance sampling where the loss scores the distribution sampled (temperature 1 and
    no top-p, or the local backend's tempered scoring); elsewhere CISPO, importance sampling with each token's ratio
    capped (training.cispo_clip_high), since the ratio then also holds the temperature's gap (up to 45 on the tiny
    policy at 0.3, for the tokens the tempered sampler rarely picks). Any other value is kept."""
    if loss_fn != "auto":
        return loss_fn
    if tempered or (temperature == 1.0 and top_p == 1.0):
        return "importance_sampling"
    return "cispo"


class StepSizeGuard:
    """Keeps each update's post-update KL (`optim/kl_pre_post_v1`, nats per completion token) near
    `training.max_step_kl` by scaling the learning rate down, never up past `training.learning_rate`.

    Adam moves every coordinate by about the learning rate whatever the batch says (its first step from a fresh
    optimizer is lr x sign(gradient)), so how far a step moves the policy is set by the learning rate, not by how
    much the batch has to teach: on the tiny local policy one step at 3e-4 moved it 0.05-0.12 nats a token, and
    five such steps undid its warm start. The KL of a step grows as the square of its learning rate, so after each
    trained step `c = kl / lr**2` is noted and the next step runs at `min(lr, sqrt(target / max c of the last
    `window` steps))`, at most twice the last step's rate (the square law is trusted only that far); the first
    trained step, with nothing measured yet, runs at `first_scale` x lr."""

    def __init__(self, target: float | None, window: int = 3, first_scale: float = 0.1) -> None:
        self.target = target
        self.window = window
        self.first_scale = first_scale
        self.sensitivity: list[float] = []  # kl / lr**2 of the last trained steps
        self.last_rate: float | None = None

    @property
    def enabled(self) -> bool:
        return self.target is not None and self.target > 0

    def learning_rate(self, base: float) -> float:
        if not self.enabled:
            return base
        if not self.sensitivity:
            return base * self.first_scale
        worst = max(self.sensitivity[-self.window:])
        rate = base if worst <= 0 else min(base, math.sqrt(float(self.target) / worst))
        return rate if self.last_rate is None else min(rate, 2.0 * self.last_rate)

    def observe(self, learning_rate: float, kl: float | None) -> None:
        """A trained step's learning rate and its measured post-update KL (None: not measured)."""
        if kl is None or learning_rate <= 0 or not math.isfinite(kl):
            return
        self.sensitivity.append(max(kl, 0.0) / learning_rate ** 2)
        del self.sensitivity[:-self.window]
        self.last_rate = learning_rate

    def replay(self, step_metrics: Sequence[dict[str, float]]) -> None:
        """Rebuild the state of a resumed run from its stored step metrics (steps ascending)."""
        for metrics in step_metrics:
            if "optim/lr" in metrics and "optim/kl_pre_post_v1" in metrics:
                self.observe(float(metrics["optim/lr"]), float(metrics["optim/kl_pre_post_v1"]))


def train_step(training_client: Any, datums: Sequence[tinker.Datum], prompt_lengths: Sequence[int], training: Any,
               *, loss_fn_config: dict[str, Any] | None = None, base_sampler: Any | None = None,
               learning_rate: float | None = None, temperature: float | None = None,
               loss_fn: str | None = None) -> TrainOutcome:
    """Train on `datums` (prompt_lengths: prompt tokens of each, to find its completion positions).

    With `training.kl_penalty_coef` > 0, `base_sampler` (a sampling client of the reference policy) scores the
    batch first and the cookbook's KL penalty is added to each datum's advantages. `temperature` (the local
    backend only): the loss, and the reference, score tokens under the distribution sampled at that temperature."""
    from tinker_cookbook.utils.misc_utils import split_list

    if not datums:
        return TrainOutcome()
    penalty_metrics: dict[str, float] = {}
    if training.kl_penalty_coef > 0:
        if base_sampler is None:
            raise ValueError("training.kl_penalty_coef > 0 needs a sampling client of the base model")
        penalty_metrics = kl_penalty(datums, prompt_lengths, base_sampler, training.kl_penalty_coef,
                                     training.kl_discount_factor, temperature)
    loss_fn = loss_fn or training.loss_fn
    if loss_fn == "auto":  # called without a resolved loss: the model's own distribution is scored
        loss_fn = resolve_loss_fn(loss_fn, tempered=temperature is not None, temperature=1.0, top_p=1.0)
    if loss_fn_config is None:
        loss_fn_config = loss_config(training, loss_fn)
    if temperature is not None:
        from kernelbench_rl.policy.local import TEMPERATURE_KEY

        loss_fn_config = {**(loss_fn_config or {}), TEMPERATURE_KEY: float(temperature)}
    params = adam_params(training.learning_rate if learning_rate is None else learning_rate, training)
    order = list(range(len(datums)))
    batches = split_list(order, min(training.num_substeps, len(order)))
    futures = []
    for batch in batches:  # submit all: the service runs them in order, the next one already queued
        fwd_bwd = training_client.forward_backward([datums[i] for i in batch], loss_fn=loss_fn,
                                                   loss_fn_config=loss_fn_config)
        futures.append((batch, fwd_bwd, training_client.optim_step(params)))
    loss_sum, have_loss = 0.0, False
    training_logprobs: dict[int, torch.Tensor] = {}
    optimizer_metrics: dict[str, list[float]] = {}
    for batch, fwd_bwd, optim in futures:
        output = result_of(fwd_bwd)
        for key, value in (getattr(result_of(optim), "metrics", None) or {}).items():
            optimizer_metrics.setdefault(key, []).append(float(value))
        loss = _loss_of(output)
        if loss is not None:
            loss_sum, have_loss = loss_sum + loss, True
        for index, item in zip(batch, output.loss_fn_outputs, strict=True):
            training_logprobs[index] = item["logprobs"].to_torch().float().reshape(-1)
    metrics = sample_train_kl(datums, [training_logprobs[i] for i in order], prompt_lengths)
    metrics["optim/num_substeps"] = float(len(batches))
    metrics["optim/lr"] = float(params.learning_rate)
    metrics.update({f"optim/{key}": sum(values) / len(values) for key, values in optimizer_metrics.items()
                    if key != "step"})
    metrics.update(penalty_metrics)
    return TrainOutcome(loss_sum if have_loss else None, metrics, [training_logprobs[i] for i in order])


def _with_masks(datums: Sequence[tinker.Datum], prompt_lengths: Sequence[int]) -> list[tinker.Datum]:
    """The datums with the cookbook's `mask` input: 1 on completion targets, 0 on prompt targets."""
    masked = []
    for datum, prompt_length in zip(datums, prompt_lengths, strict=True):
        mask = torch.zeros(datum.model_input.length, dtype=torch.float32)
        mask[max(prompt_length - 1, 0):] = 1.0  # targets from the first completion token on
        masked.append(tinker.Datum(model_input=datum.model_input, loss_fn_inputs={
            **datum.loss_fn_inputs, "mask": tinker.TensorData.from_torch(mask)}))
    return masked


class _Logprobs:
    """A sampling client as the cookbook's async helpers call it (`compute_logprobs_async`), for clients that
    have only Tinker's future-returning `compute_logprobs` (the local backend)."""

    def __init__(self, client: Any, cache: bool = False, temperature: float | None = None) -> None:
        self.client = client
        self._cache: dict[tuple[int, ...], list[float | None]] | None = {} if cache else None
        self.temperature = temperature  # the local backend's tempered scoring (compute_tempered_logprobs)

    async def compute_logprobs_async(self, model_input: tinker.ModelInput) -> list[float | None]:
        key = tuple(model_input.to_ints()) if self._cache is not None else None
        if key is not None and key in self._cache:
            return self._cache[key]
        native = getattr(self.client, "compute_logprobs_async", None)
        if self.temperature is not None:
            logprobs = await asyncio.to_thread(
                result_of, self.client.compute_tempered_logprobs(model_input, float(self.temperature)))
        elif native is not None:
            logprobs = await native(model_input)
        else:
            logprobs = await asyncio.to_thread(result_of, self.client.compute_logprobs(model_input))
        if key is not None:
            self._cache[key] = logprobs
        return logprobs


def kl_penalty(datums: Sequence[tinker.Datum], prompt_lengths: Sequence[int], base_sampler: Any, coef: float,
               discount: float, temperature: float | None = None) -> dict[str, float]:
    """tinker-cookbook's incorporate_kl_penalty: each completion token's advantage gains
    coef * (mean log-ratio - its own log-ratio of sampler to the reference policy), in place. Returns
    kl_policy_base. With `discount` > 0 the cookbook sums each token's penalty with the discounted ones after it,
    which also fills prompt positions (their mask is 0 only before the sum): what it added there is taken back, so
    prompt tokens keep an advantage of 0."""
    from tinker_cookbook.rl.metrics import incorporate_kl_penalty

    masked = _with_masks(datums, prompt_lengths)
    before = [datum.loss_fn_inputs["advantages"].to_torch().float() for datum in datums]
    metrics = asyncio.run(incorporate_kl_penalty(masked, _Logprobs(base_sampler, temperature=temperature), coef,
                                                 discount))
    for datum, penalised, advantages, masked_datum in zip(datums, masked, before, masked, strict=True):
        mask = masked_datum.loss_fn_inputs["mask"].to_torch().float()
        added = penalised.loss_fn_inputs["advantages"].to_torch().float() - advantages
        datum.loss_fn_inputs["advantages"] = tinker.TensorData.from_torch(advantages + added * mask)
    return {f"optim/{key}": float(value) for key, value in metrics.items()}


def post_update_kl(datums: Sequence[tinker.Datum], prompt_lengths: Sequence[int], sampler: Any,
                   training_logprobs: Sequence[torch.Tensor] | None = None,
                   temperature: float | None = None) -> dict[str, float]:
    """tinker-cookbook's compute_post_kl, twice. `optim/kl_pre_post_v1/_v2`: how far the step moved the policy on
    its own batch, the updated weights' logprobs against the trainer's own before the update (`training_logprobs`,
    from the loss's forward pass: same temperature, no lag). `optim/kl_sample_post_v1/_v2`: the cookbook's own,
    against the sampler's logprobs, which also holds the sampler's temperature and lag."""
    from tinker_cookbook.rl.metrics import compute_post_kl

    if not datums:
        return {}
    masked = _with_masks(datums, prompt_lengths)
    updated = _Logprobs(sampler, cache=True, temperature=temperature)  # one forward pass of the updated weights serves both
    sample_post = asyncio.run(compute_post_kl(masked, updated))
    metrics = {f"optim/{key.replace('pre_post', 'sample_post')}": float(value) for key, value in sample_post.items()}
    if training_logprobs is not None:
        as_trained = [tinker.Datum(model_input=d.model_input, loss_fn_inputs={
            **d.loss_fn_inputs, "logprobs": tinker.TensorData.from_torch(lp.float().reshape(-1))})
            for d, lp in zip(masked, training_logprobs, strict=True)]
        pre_post = asyncio.run(compute_post_kl(as_trained, updated))
        metrics.update({f"optim/{key}": float(value) for key, value in pre_post.items()})
    return metrics


def sample_train_kl(datums: Sequence[tinker.Datum], training_logprobs: Sequence[torch.Tensor],
                    prompt_lengths: Sequence[int]) -> dict[str, float]:
    """tinker-cookbook's sample/train KL estimators over the completion tokens of each datum."""
    from tinker_cookbook.rl.metrics import compute_kl_sample_train

    return compute_kl_sample_train(_with_masks(datums, prompt_lengths), list(training_logprobs))


def result_of(value: Any) -> Any:
    return value.result() if hasattr(value, "result") and callable(value.result) else value


def _loss_of(output: Any) -> float | None:
    metrics = getattr(output, "metrics", None) or {}
    for key in ("loss:sum", "loss:mean", "loss"):
        if key in metrics:
            return float(metrics[key])
    return None
