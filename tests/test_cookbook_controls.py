"""The cookbook's RL controls on the real local backend: sampler logprobs of the distribution actually sampled
(temperature, top_p), PPO's clip range, the optimizer's metrics, the KL penalty against the base model and the
post-update KL, through `train_step` and the training loop."""

from __future__ import annotations

import json
import math
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from tinker import types

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.policy import PolicyConfig, make_service_client
from kernelbench_rl.policy.local import LocalServiceClient
from kernelbench_rl.training.optim import kl_penalty, train_step

PROMPT_TEXT = "def forward(self, x):"


def _service(tmp_path: Path, seed: int = 0) -> LocalServiceClient:
    return make_service_client(PolicyConfig(backend="local", base_model="local:tiny", device="cpu",
                                            log_dir=str(tmp_path / f"policy{seed}"), seed=seed))


def _expected_logprob(logits: torch.Tensor, token: int, temperature: float, top_p: float) -> float:
    """Written out on its own: the tempered distribution, its top_p head (tokens sorted by probability, kept
    while the mass before them is under top_p), renormalised."""
    probs = torch.softmax(logits.double() / temperature, dim=-1)
    order = torch.argsort(probs, descending=True).tolist()
    kept, mass = [], 0.0
    for index in order:
        if mass >= top_p:
            break
        kept.append(index)
        mass += float(probs[index])
    assert token in kept
    return math.log(float(probs[token]) / sum(float(probs[i]) for i in kept))


def test_sampled_logprobs_are_those_of_the_tempered_top_p_distribution(tmp_path: Path) -> None:
    service = _service(tmp_path)
    try:
        sampler = service.create_sampling_client(base_model="local:tiny").result()
        prompt = types.ModelInput.from_ints(sampler.get_tokenizer().encode(PROMPT_TEXT, add_special_tokens=False))
        params = types.SamplingParams(max_tokens=12, temperature=0.3, top_p=0.9, seed=3, stop=[])
        sequence = sampler.sample(prompt=prompt, num_samples=1, sampling_params=params).result().sequences[0]
        tokens = prompt.to_ints() + list(sequence.tokens)
        engine = service._engine("local:tiny", sampler._base_seed)
        with torch.no_grad(), engine.model_for(None) as model:
            logits = model(input_ids=torch.tensor([tokens])).logits[0].float()
        expected = [_expected_logprob(logits[prompt.length - 1 + i], token, 0.3, 0.9)
                    for i, token in enumerate(sequence.tokens)]
        assert sequence.logprobs == pytest.approx(expected, abs=1e-4)
        # the model's own (untempered) logprobs are something else: the importance ratio needs the sampled ones
        untempered = sampler.compute_logprobs(types.ModelInput.from_ints(tokens)).result()[prompt.length:]
        assert max(abs(a - b) for a, b in zip(untempered, sequence.logprobs)) > 0.1
    finally:
        service.close("success")


def _training(**overrides) -> SimpleNamespace:
    fields = dict(learning_rate=1e-3, adam_beta1=0.9, adam_beta2=0.95, adam_eps=1e-8, num_substeps=1,
                  loss_fn="ppo", ppo_clip_low=0.8, ppo_clip_high=1.2, kl_penalty_coef=0.0, kl_discount_factor=0.0)
    fields.update(overrides)
    return SimpleNamespace(**fields)


def _datum(service: LocalServiceClient, advantage: float = 1.0, logprob_shift: float = 0.0):
    """A datum as grpo.sample_to_datum lays it out, from a sequence the base model sampled."""
    from kernelbench_rl.training.grpo import SampleTurn, sample_to_datum

    sampler = service.create_sampling_client(base_model="local:tiny").result()
    prompt = sampler.get_tokenizer().encode(PROMPT_TEXT, add_special_tokens=False)
    params = types.SamplingParams(max_tokens=8, seed=1, stop=[])
    sequence = sampler.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=1,
                              sampling_params=params).result().sequences[0]
    sample = SampleTurn(problem_id="L1/19", level=1, sample_index=0, turn=0, prompt_tokens=prompt,
                        completion_tokens=list(sequence.tokens),
                        logprobs=[lp + logprob_shift for lp in sequence.logprobs], reward=1.0, advantage=advantage,
                        trainable=True)
    return sample_to_datum(sample), len(prompt)


def test_the_ppo_clip_range_reaches_the_loss_and_the_grad_norm_is_kept(tmp_path: Path) -> None:
    """Sampler logprobs 2 nats below the trainer's put every ratio at e^2: the clip decides the loss."""
    losses = {}
    for low, high in ((0.8, 1.2), (0.5, 1.5)):
        service = _service(tmp_path)
        try:
            client = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
            datum, prompt_length = _datum(service, advantage=1.0, logprob_shift=-2.0)
            outcome = train_step(client, [datum], [prompt_length], _training(ppo_clip_low=low, ppo_clip_high=high))
        finally:
            service.close("success")
        completion = datum.model_input.length - (prompt_length - 1)
        losses[high] = outcome.loss
        assert outcome.loss == pytest.approx(-high * completion, rel=1e-4)  # every ratio clipped at `high`, A = 1
        assert outcome.metrics["optim/grad_norm"] == 0.0  # a clipped ratio carries no gradient
    assert losses[1.2] != losses[1.5]
    service = _service(tmp_path)
    try:
        client = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
        datum, prompt_length = _datum(service)
        outcome = train_step(client, [datum], [prompt_length], _training(loss_fn="importance_sampling"))
        assert outcome.metrics["optim/grad_norm"] > 0.0
    finally:
        service.close("success")


def test_the_kl_penalty_moves_each_advantage_by_the_cookbook_formula(tmp_path: Path) -> None:
    """Base model: the tiny model of another seed. Each completion token's advantage gains
    coef * (mean log-ratio - its own log-ratio), the log-ratio being sampler logprob minus base logprob."""
    policy, base_service = _service(tmp_path, seed=0), _service(tmp_path, seed=1)
    try:
        datum, prompt_length = _datum(policy, advantage=0.5)
        base = base_service.create_sampling_client(base_model="local:tiny").result()
        tokens = datum.model_input.to_ints() + [int(datum.loss_fn_inputs["target_tokens"].to_torch()[-1])]
        base_lp = torch.tensor(base.compute_logprobs(types.ModelInput.from_ints(tokens)).result()[prompt_length:])
        sampled_lp = datum.loss_fn_inputs["logprobs"].to_torch()[prompt_length - 1:]
        before = datum.loss_fn_inputs["advantages"].to_torch().clone()
        metrics = kl_penalty([datum], [prompt_length], base, coef=0.1, discount=0.0)
        after = datum.loss_fn_inputs["advantages"].to_torch()
    finally:
        policy.close("success")
        base_service.close("success")
    diff = sampled_lp - base_lp
    assert metrics["optim/kl_policy_base"] == pytest.approx(float(diff.mean()), abs=1e-5)
    torch.testing.assert_close(after[prompt_length - 1:], before[prompt_length - 1:] + 0.1 * (diff.mean() - diff),
                               atol=1e-5, rtol=0)
    assert torch.equal(after[:prompt_length - 1], before[:prompt_length - 1])  # the prompt stays untrained
    assert "mask" not in datum.loss_fn_inputs  # the datum keeps the layout forward_backward expects


def test_the_loop_logs_the_kl_penalty_post_update_kl_and_optimizer_metrics(tmp_path: Path) -> None:
    from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
    from kernelbench_rl.store import Store
    from kernelbench_rl.training import run_training

    def judge(problem_ids, responses):  # even-length answers count as well formed: the tiny model varies on it
        return [EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32", device_kind="cpu",
                           format_ok=len(r) % 2 == 0, error_category=ErrorCategory.FORMAT)
                for pid, r in zip(problem_ids, responses)]

    base = [f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "policy.backend=local",
            "policy.base_model=local:tiny", "policy.lora_rank=4", "training.steps=2", "training.batch_problems=2",
            "sampling.group_size=4", "sampling.max_tokens=8", "problems.ids=L1/19,L1/20", "problems.levels=[1]",
            "problems.holdout_fraction=0", "eval.device=cpu", "rewards.truncated=keep", "curriculum.enabled=false",
            "sft.enabled=false", "training.learning_rate=0.01", "training.max_steps_off_policy=0"]
    on = load_config("default", base + ["run_id=kl-on", "training.kl_penalty_coef=0.1", "training.compute_post_kl=true"])
    run_training(build_run_parts(on, policy_beside=True), progress=False, evaluate_fn=judge)
    off = load_config("default", base + ["run_id=kl-off"])
    run_training(build_run_parts(off, policy_beside=True), progress=False, evaluate_fn=judge)
    store = Store(tmp_path / "kb.duckdb")

    def metrics(run_id: str) -> list[dict]:
        return [json.loads(r[0]) for r in store.fetchall(
            "SELECT metrics_json FROM train_steps WHERE run_id = ? AND num_trained > 0 ORDER BY step", [run_id])]

    trained_on, trained_off = metrics("kl-on"), metrics("kl-off")
    assert trained_on and trained_off
    for m in trained_on:
        assert {"optim/kl_policy_base", "optim/kl_pre_post_v1", "optim/kl_pre_post_v2", "optim/grad_norm"} <= set(m)
        assert m["optim/kl_pre_post_v2"] > 0  # the step moved the policy on its own batch
    for m in trained_off:  # off by default: no base model scored, no extra forward pass
        assert "optim/grad_norm" in m and "optim/kl_policy_base" not in m and "optim/kl_pre_post_v1" not in m
