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
    off = load_config("default", base + ["run_id=kl-off", "training.max_step_kl=null"])
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
    for m in trained_off:  # off: no base model scored, no extra forward pass
        assert "optim/grad_norm" in m and "optim/kl_policy_base" not in m and "optim/kl_pre_post_v1" not in m


def test_a_discounted_kl_penalty_leaves_prompt_tokens_untrained(tmp_path: Path) -> None:
    """The cookbook sums each token's penalty with the discounted ones after it over the whole sequence, prompt
    positions included (their mask is 0 before the sum, not after): they gained advantages and would be trained."""
    policy, base_service = _service(tmp_path, seed=0), _service(tmp_path, seed=1)
    try:
        datum, prompt_length = _datum(policy, advantage=0.5)
        base = base_service.create_sampling_client(base_model="local:tiny").result()
        before = datum.loss_fn_inputs["advantages"].to_torch().clone()
        kl_penalty([datum], [prompt_length], base, coef=0.5, discount=0.9)
        after = datum.loss_fn_inputs["advantages"].to_torch()
    finally:
        policy.close("success")
        base_service.close("success")
    assert torch.equal(after[:prompt_length - 1], before[:prompt_length - 1])
    assert not torch.equal(after[prompt_length - 1:], before[prompt_length - 1:])  # the completion's did move


def test_cispo_weighs_each_logprob_by_the_clipped_detached_ratio(tmp_path: Path) -> None:
    """Sampler logprobs 3 nats below the trainer's: every ratio is e^3 (20), clipped to the cap (4, Tinker's default),
    and the loss is -cap * sum(logp * A); the gradient stays (CISPO never zeroes a token's)."""
    service = _service(tmp_path)
    try:
        client = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
        datum, prompt_length = _datum(service, advantage=1.0, logprob_shift=-3.0)
        trainer_lp = client.forward([datum], "cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_torch()
        outcome = train_step(client, [datum], [prompt_length], _training(loss_fn="cispo", cispo_clip_low=0.0,
                                                                         cispo_clip_high=4.0))
    finally:
        service.close("success")
    completion_lp = trainer_lp[prompt_length - 1:]
    assert outcome.loss == pytest.approx(float(-4.0 * completion_lp.sum()), rel=1e-4)
    assert outcome.metrics["optim/grad_norm"] > 0.0


def test_kl_pre_post_measures_the_update_not_the_sampling_temperature(tmp_path: Path) -> None:
    """A batch sampled at temperature 0.3 and a step too small to move anything: the sampler's logprobs (of the
    tempered distribution) are far from the model's own, so the cookbook's post-update KL from them is large; how far
    the step moved the policy is ~0. kl_pre_post once reported the first and read as the second."""
    from kernelbench_rl.training.grpo import SampleTurn, sample_to_datum
    from kernelbench_rl.training.optim import post_update_kl

    service = _service(tmp_path)
    try:
        client = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
        sampler = client.save_weights_and_get_sampling_client().result()
        prompt = sampler.get_tokenizer().encode(PROMPT_TEXT, add_special_tokens=False)
        params = types.SamplingParams(max_tokens=16, temperature=0.3, seed=2, stop=[])
        sequence = sampler.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=1,
                                  sampling_params=params).result().sequences[0]
        sample = SampleTurn(problem_id="L1/19", level=1, sample_index=0, turn=0, prompt_tokens=prompt,
                            completion_tokens=list(sequence.tokens), logprobs=list(sequence.logprobs), reward=1.0,
                            advantage=1.0, trainable=True)
        datum = sample_to_datum(sample)
        outcome = train_step(client, [datum], [len(prompt)], _training(loss_fn="importance_sampling",
                                                                       learning_rate=1e-12))
        after = client.save_weights_and_get_sampling_client().result()
        metrics = post_update_kl([datum], [len(prompt)], after, outcome.training_logprobs)
    finally:
        service.close("success")
    assert abs(metrics["optim/kl_pre_post_v1"]) < 1e-4 and metrics["optim/kl_pre_post_v2"] < 1e-6
    assert metrics["optim/kl_sample_post_v2"] > 0.01  # the temperature's share, kept under its own name


def test_the_step_size_guard_scales_the_learning_rate_to_the_kl_budget() -> None:
    from kernelbench_rl.training.optim import StepSizeGuard

    guard = StepSizeGuard(0.01)
    assert guard.learning_rate(3e-4) == pytest.approx(3e-5)  # nothing measured: a tenth
    guard.observe(3e-5, 0.04)  # 0.04 nats at 3e-5: four times the budget, so half the learning rate (KL ~ lr^2)
    assert guard.learning_rate(3e-4) == pytest.approx(1.5e-5)
    guard.observe(1.5e-5, 1e-6)  # a quiet step does not lift the rate while a recent step was loud
    assert guard.learning_rate(3e-4) == pytest.approx(1.5e-5)
    guard.observe(1.5e-5, 1e-6)
    guard.observe(1.5e-5, 1e-6)  # the loud one is out of the window (3 steps): up, at most twice the last rate
    assert guard.learning_rate(3e-4) == pytest.approx(3e-5)
    for rate in (3e-5, 6e-5, 1.2e-4, 2.4e-4):
        guard.observe(rate, 1e-6)
    assert guard.learning_rate(3e-4) == pytest.approx(3e-4)  # never past the configured rate
    resumed = StepSizeGuard(0.01)
    resumed.replay([{"optim/lr": 3e-5, "optim/kl_pre_post_v1": 0.04}, {"loss": 1.0}])
    assert resumed.learning_rate(3e-4) == pytest.approx(1.5e-5)
    assert StepSizeGuard(None).learning_rate(3e-4) == 3e-4


def test_the_loop_keeps_each_step_within_its_kl_budget(tmp_path: Path) -> None:
    """A learning rate far too large for the tiny model (0.05): unguarded, a step moves the policy by nats a token;
    with training.max_step_kl the first step runs at a tenth and the later ones near the budget."""
    from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
    from kernelbench_rl.store import Store
    from kernelbench_rl.training import run_training

    def judge(problem_ids, responses):
        return [EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32", device_kind="cpu",
                           format_ok=len(r) % 2 == 0, error_category=ErrorCategory.FORMAT)
                for pid, r in zip(problem_ids, responses)]

    base = [f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "policy.backend=local",
            "policy.base_model=local:tiny", "policy.lora_rank=4", "training.steps=4", "training.batch_problems=2",
            "sampling.group_size=4", "sampling.max_tokens=12", "problems.ids=L1/19,L1/20", "problems.levels=[1]",
            "problems.holdout_fraction=0", "eval.device=cpu", "rewards.truncated=keep", "curriculum.enabled=false",
            "sft.enabled=false", "training.learning_rate=0.05", "training.max_steps_off_policy=0",
            "training.compute_post_kl=true"]
    for run_id, extra in (("guarded", ["training.max_step_kl=0.01"]), ("unguarded", ["training.max_step_kl=null"])):
        run_training(build_run_parts(load_config("default", base + [f"run_id={run_id}", *extra]), policy_beside=True),
                     progress=False, evaluate_fn=judge)
    store = Store(tmp_path / "kb.duckdb")

    def trained(run_id: str) -> list[dict]:
        return [json.loads(r[0]) for r in store.fetchall(
            "SELECT metrics_json FROM train_steps WHERE run_id = ? AND num_trained > 0 ORDER BY step", [run_id])]

    guarded, unguarded = trained("guarded"), trained("unguarded")
    assert len(guarded) >= 2 and unguarded
    assert guarded[0]["optim/lr"] == pytest.approx(0.005)
    assert all(m["optim/lr"] <= 0.05 for m in guarded)
    assert max(m["optim/kl_pre_post_v1"] for m in unguarded) > 0.1
    assert max(m["optim/kl_pre_post_v1"] for m in guarded[1:]) < 0.05


def test_the_local_loss_scores_tokens_under_the_tempered_distribution_sampled(tmp_path: Path) -> None:
    """Sampled at temperature 0.3, the trainer's logprobs of the model's own distribution are far from the sampler's
    (importance ratios up to 45 on the tiny policy, a sample/train KL of 0.03-0.05 a token on-policy). Scored under
    the tempered distribution (the local backend's `sampling_temperature`), they are the sampler's: the ratio is 1
    on-policy and the policy trained is the policy sampled."""
    from kernelbench_rl.policy.local import TEMPERATURE_KEY
    from kernelbench_rl.training.grpo import SampleTurn, sample_to_datum

    service = _service(tmp_path)
    try:
        client = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
        sampler = client.save_weights_and_get_sampling_client().result()
        prompt = sampler.get_tokenizer().encode(PROMPT_TEXT, add_special_tokens=False)
        params = types.SamplingParams(max_tokens=16, temperature=0.3, seed=4, stop=[])
        sequence = sampler.sample(prompt=types.ModelInput.from_ints(prompt), num_samples=1,
                                  sampling_params=params).result().sequences[0]
        datum = sample_to_datum(SampleTurn(problem_id="L1/19", level=1, sample_index=0, turn=0, prompt_tokens=prompt,
                                           completion_tokens=list(sequence.tokens), logprobs=list(sequence.logprobs),
                                           reward=1.0, advantage=1.0, trainable=True))
        untempered = client.forward([datum], "importance_sampling").result().loss_fn_outputs[0]["logprobs"].to_torch()
        tempered = client.forward([datum], "importance_sampling", {TEMPERATURE_KEY: 0.3}).result() \
            .loss_fn_outputs[0]["logprobs"].to_torch()
        scored = sampler.compute_tempered_logprobs(types.ModelInput.from_ints(prompt + list(sequence.tokens)),
                                                   0.3).result()[len(prompt):]
    finally:
        service.close("success")
    completion = slice(len(prompt) - 1, None)
    assert tempered[completion].tolist() == pytest.approx(list(sequence.logprobs), abs=1e-4)
    assert scored == pytest.approx(list(sequence.logprobs), abs=1e-4)
    assert float((untempered[completion] - torch.tensor(sequence.logprobs)).abs().max()) > 0.1


def test_the_loop_trains_the_policy_it_samples_at_a_temperature(tmp_path: Path) -> None:
    """Local backend, sampling at 0.3, synchronous (every step on-policy): the sample/train KL is ~0, where scoring
    the model's own distribution read the temperature's gap as a KL of several hundredths a token."""
    from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
    from kernelbench_rl.store import Store
    from kernelbench_rl.training import run_training

    def judge(problem_ids, responses):
        return [EvalResult(problem_id=pid, candidate_sha256="x", backend="triton", precision="fp32", device_kind="cpu",
                           format_ok=len(r) % 2 == 0, error_category=ErrorCategory.FORMAT)
                for pid, r in zip(problem_ids, responses)]

    base = [f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "policy.backend=local",
            "policy.base_model=local:tiny", "policy.lora_rank=4", "training.steps=2", "training.batch_problems=2",
            "sampling.group_size=4", "sampling.max_tokens=12", "sampling.temperature=0.3", "problems.ids=L1/19,L1/20",
            "problems.levels=[1]", "problems.holdout_fraction=0", "rewards.truncated=keep", "curriculum.enabled=false",
            "sft.enabled=false", "training.max_steps_off_policy=0"]
    for run_id, extra in (("tempered", []), ("model", ["training.tempered_logprobs=false"])):
        run_training(build_run_parts(load_config("default", base + [f"run_id={run_id}", *extra]), policy_beside=True),
                     progress=False, evaluate_fn=judge)
    store = Store(tmp_path / "kb.duckdb")

    def kls(run_id: str) -> list[float]:
        return [json.loads(r[0])["optim/kl_sample_train_v2"] for r in store.fetchall(
            "SELECT metrics_json FROM train_steps WHERE run_id = ? AND num_trained > 0 ORDER BY step", [run_id])]

    tempered, model = kls("tempered"), kls("model")
    assert tempered and model
    assert max(tempered) < 1e-6 and min(model) > 1e-3
