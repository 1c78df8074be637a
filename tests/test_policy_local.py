"""The local backend on the tiny model: sampling, Tinker's losses, Adam steps, checkpoints, learning."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from tinker import types

from kernelbench_rl.errors import UserError
from kernelbench_rl.policy import TINY_ASSET_DIR, PolicyConfig, make_service_client
from kernelbench_rl.policy.local import LocalServiceClient

PROMPT_TEXT = "def forward(self, x):"


def _service(tmp_path: Path, seed: int = 0) -> LocalServiceClient:
    service = make_service_client(
        PolicyConfig(backend="local", base_model="local:tiny", device="cpu", log_dir=str(tmp_path), seed=seed)
    )
    assert isinstance(service, LocalServiceClient)
    return service


@pytest.fixture
def service(tmp_path: Path):
    service = _service(tmp_path)
    yield service
    service.close("success")


def _prompt(tokenizer) -> types.ModelInput:
    return types.ModelInput.from_ints(tokenizer.encode(PROMPT_TEXT, add_special_tokens=False))


def _rl_datum(prompt: types.ModelInput, sequence: types.SampledSequence, advantage: float) -> types.Datum:
    ob_len = prompt.length - 1
    model_input = prompt.append(types.EncodedTextChunk(tokens=sequence.tokens[:-1]))
    return types.Datum(
        model_input=model_input,
        loss_fn_inputs={
            "target_tokens": [0] * ob_len + list(sequence.tokens),
            "logprobs": [0.0] * ob_len + list(sequence.logprobs),
            "advantages": [0.0] * ob_len + [advantage] * (model_input.length - ob_len),
        },
    )


def test_tiny_assets_are_small_and_the_tokenizer_round_trips(service: LocalServiceClient) -> None:
    total_bytes = sum(f.stat().st_size for f in TINY_ASSET_DIR.iterdir())
    assert total_bytes < 2 * 1024 * 1024
    assert {"tokenizer.json", "tokenizer_config.json", "config.json"} <= {f.name for f in TINY_ASSET_DIR.iterdir()}
    training_client = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
    tokenizer = training_client.get_tokenizer()
    source = "import torch\nclass ModelNew(nn.Module):\n    def forward(self, x):\n        return x * 2  # ok\n"
    ids = tokenizer.encode(source, add_special_tokens=False)
    assert tokenizer.decode(ids) == source
    assert len(ids) < len(source) / 2  # trained on kernel sources, so it really merges
    assert tokenizer.eos_token_id is not None and tokenizer.pad_token_id is not None
    chat = tokenizer.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False, add_generation_prompt=True)
    assert chat.endswith("<|im_start|>assistant\n")
    info = training_client.get_info()
    assert info.model_data.model_name == "local:tiny" and info.lora_rank == 4


def test_sampling_honours_params_and_is_seedable(service: LocalServiceClient) -> None:
    sampler = service.create_sampling_client(base_model="local:tiny").result()
    tokenizer = sampler.get_tokenizer()
    prompt = _prompt(tokenizer)

    def sample(**params):
        return sampler.sample(prompt=prompt, num_samples=3, sampling_params=types.SamplingParams(**params)).result()

    seeded = sample(max_tokens=10, seed=5, stop=[])
    again = sample(max_tokens=10, seed=5, stop=[])
    other = sample(max_tokens=10, seed=6, stop=[])
    assert [s.tokens for s in seeded.sequences] == [s.tokens for s in again.sequences]
    assert [s.tokens for s in seeded.sequences] != [s.tokens for s in other.sequences]
    assert all(len(s.tokens) == 10 and s.stop_reason == "length" for s in seeded.sequences)
    assert len({tuple(s.tokens) for s in seeded.sequences}) > 1  # the group really differs

    greedy = sample(max_tokens=6, temperature=0.0, stop=[])
    assert len({tuple(s.tokens) for s in greedy.sequences}) == 1

    # A stop token id ends the sequence with reason "stop", the stop token included.
    stop_token = seeded.sequences[0].tokens[3]
    stopped = sample(max_tokens=10, seed=5, stop=[stop_token])
    first = stopped.sequences[0]
    assert first.stop_reason == "stop" and first.tokens == seeded.sequences[0].tokens[:4]

    # A stop string ends the sequence once the decoded text contains it.
    stop_text = tokenizer.decode(seeded.sequences[1].tokens[:5])[-2:]
    by_string = sample(max_tokens=10, seed=5, stop=[stop_text]).sequences[1]
    assert by_string.stop_reason == "stop" and stop_text in tokenizer.decode(by_string.tokens)
    assert len(by_string.tokens) <= 5

    # Returned logprobs are the model's own: the same numbers compute_logprobs gives.
    sequence = seeded.sequences[0]
    scored = sampler.compute_logprobs(types.ModelInput.from_ints(prompt.to_ints() + sequence.tokens)).result()
    torch.testing.assert_close(torch.tensor(scored[prompt.length :]), torch.tensor(sequence.logprobs), atol=1e-4, rtol=0)


def test_losses_are_the_documented_token_sums(service: LocalServiceClient) -> None:
    training_client = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
    tokens = training_client.get_tokenizer().encode(PROMPT_TEXT + " return x", add_special_tokens=False)
    n = len(tokens) - 1
    targets = tokens[1:]
    sampler_logprobs = [-7.0 + 0.3 * (i % 5) for i in range(n)]  # far enough off to make PPO clip
    advantages = [(-1.0) ** i * (0.5 + 0.1 * i) for i in range(n)]
    weights = [0.0, 0.0] + [1.0] * (n - 2)
    datum = types.Datum(
        model_input=types.ModelInput.from_ints(tokens[:-1]),
        loss_fn_inputs={"target_tokens": targets, "logprobs": sampler_logprobs, "advantages": advantages, "weights": weights},
    )
    logp = torch.tensor(
        training_client.forward([datum], loss_fn="cross_entropy").result().loss_fn_outputs[0]["logprobs"].tolist()
    )
    q, adv, w = torch.tensor(sampler_logprobs), torch.tensor(advantages), torch.tensor(weights)
    ratio = torch.exp(logp - q)
    expected = {
        "cross_entropy": -(w * logp).sum(),
        "importance_sampling": -(ratio * adv).sum(),
        "ppo": -torch.min(ratio * adv, ratio.clamp(0.8, 1.2) * adv).sum(),
    }
    assert not torch.allclose(ratio.clamp(0.8, 1.2), ratio)  # the PPO case really clips
    for loss_fn, value in expected.items():
        got = training_client.forward_backward([datum], loss_fn=loss_fn).result().metrics["loss:sum"]
        assert math.isclose(got, float(value), rel_tol=1e-4), loss_fn
    ppo_wide = training_client.forward(
        [datum], loss_fn="ppo", loss_fn_config={"clip_low_threshold": 0.0, "clip_high_threshold": 1e9}
    ).result()
    assert math.isclose(ppo_wide.metrics["loss:sum"], float(expected["importance_sampling"]), rel_tol=1e-4)
    with pytest.raises(UserError, match="cross_entropy, importance_sampling, ppo"):
        training_client.forward_backward([datum], loss_fn="dro")


def test_gradients_accumulate_until_optim_step(tmp_path: Path) -> None:
    service = _service(tmp_path)
    split = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
    whole = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
    tokenizer = split.get_tokenizer()
    prompt = _prompt(tokenizer)
    sampler = split.save_weights_and_get_sampling_client().result()
    sequences = sampler.sample(prompt=prompt, num_samples=4, sampling_params=types.SamplingParams(max_tokens=8, seed=1, stop=[])).result().sequences
    datums = [_rl_datum(prompt, s, adv) for s, adv in zip(sequences, [1.0, -1.0, 0.5, -0.5])]
    adam = types.AdamParams(learning_rate=1e-2)

    split.forward_backward(datums[:2], loss_fn="importance_sampling")
    split.forward_backward(datums[2:], loss_fn="importance_sampling")
    split.optim_step(adam).result()
    whole.forward_backward(datums, loss_fn="importance_sampling")
    whole.optim_step(adam).result()

    probe = datums[0]
    after_split = split.forward([probe], loss_fn="cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_torch()
    after_whole = whole.forward([probe], loss_fn="cross_entropy").result().loss_fn_outputs[0]["logprobs"].to_torch()
    before = sampler.compute_logprobs(types.ModelInput.from_ints(prompt.to_ints() + sequences[0].tokens)).result()
    torch.testing.assert_close(after_split, after_whole, atol=1e-5, rtol=0)
    assert not torch.allclose(after_split[prompt.length - 1 :], torch.tensor(before[prompt.length :]), atol=1e-4)
    service.close("success")


def test_save_and_load_round_trip_restores_identical_sampling(tmp_path: Path) -> None:
    service = _service(tmp_path)
    training_client = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
    prompt = _prompt(training_client.get_tokenizer())
    adam = types.AdamParams(learning_rate=2e-2)
    params = types.SamplingParams(max_tokens=8, seed=3, stop=[])

    def train_step(client) -> None:
        sampler = client.save_weights_and_get_sampling_client().result()
        sequences = sampler.sample(prompt=prompt, num_samples=4, sampling_params=params).result().sequences
        datums = [_rl_datum(prompt, s, adv) for s, adv in zip(sequences, [1.0, -1.0, 0.5, -0.5])]
        client.forward_backward(datums, loss_fn="importance_sampling")
        client.optim_step(adam).result()

    def sampled(client_or_sampler):
        sampler = client_or_sampler
        if hasattr(client_or_sampler, "save_weights_and_get_sampling_client"):
            sampler = client_or_sampler.save_weights_and_get_sampling_client().result()
        return [(s.tokens, s.logprobs) for s in sampler.sample(prompt=prompt, num_samples=2, sampling_params=params).result().sequences]

    train_step(training_client)
    train_step(training_client)
    state_path = training_client.save_state("step_0002").result().path
    sampler_path = training_client.save_weights_for_sampler("step_0002").result().path
    assert Path(state_path).is_dir() and Path(sampler_path).is_dir()
    assert Path(state_path).parent == tmp_path / "weights"
    reference = sampled(training_client)

    # A fresh process would see only the files: use a new service.
    fresh = _service(tmp_path)
    from_sampler_weights = fresh.create_sampling_client(model_path=sampler_path).result()
    assert sampled(from_sampler_weights) == reference
    resumed = fresh.create_training_client_from_state_with_optimizer(state_path).result()
    assert resumed.step == 2
    assert sampled(resumed) == reference

    # The optimizer state came back too: one more identical step keeps both in lockstep.
    train_step(training_client)
    train_step(resumed)
    assert sampled(resumed) == sampled(training_client)

    weights_only = fresh.create_training_client_from_state(state_path).result()
    assert weights_only.step == 0 and sampled(weights_only) == reference

    with pytest.raises(UserError, match="already exists"):
        training_client.save_state("step_0002").result()
    assert training_client.save_state("step_0002", overwrite=True).result().path == state_path
    with pytest.raises(UserError, match="not a local-backend checkpoint"):
        fresh.create_sampling_client(model_path=str(tmp_path)).result()
    fresh.close("success")
    service.close("success")


def test_the_tiny_model_is_reproducible_from_its_seed(tmp_path: Path) -> None:
    params = types.SamplingParams(max_tokens=6, seed=11, stop=[])

    def logprobs_with(seed: int) -> list[list[float]]:
        service = _service(tmp_path, seed=seed)
        sampler = service.create_sampling_client(base_model="local:tiny").result()
        prompt = _prompt(sampler.get_tokenizer())
        result = sampler.sample(prompt=prompt, num_samples=2, sampling_params=params).result()
        service.close("success")
        return [s.logprobs for s in result.sequences]

    assert logprobs_with(0) == logprobs_with(0)
    assert logprobs_with(0) != logprobs_with(1)


def test_unknown_model_or_device_is_a_user_error(tmp_path: Path) -> None:
    service = _service(tmp_path)
    with pytest.raises(UserError, match="Cannot load"):
        service.create_lora_training_client(base_model=str(tmp_path / "no-such-model")).result()
    service.close("success")
    if not torch.cuda.is_available():
        with pytest.raises(UserError, match="CUDA"):
            make_service_client(PolicyConfig(backend="local", device="cuda"))


def test_mean_reward_rises_when_the_reward_favours_a_learnable_pattern(tmp_path: Path) -> None:
    """GRPO-style loop: reward = share of sampled tokens whose id is a multiple of 8 (1/8 at random)."""
    service = _service(tmp_path)
    training_client = service.create_lora_training_client(base_model="local:tiny", rank=8).result()
    prompt = _prompt(training_client.get_tokenizer())
    sampling_params = types.SamplingParams(max_tokens=24, temperature=1.0, stop=[])
    adam = types.AdamParams(learning_rate=3e-2)
    mean_rewards: list[float] = []
    for _ in range(STEPS):
        sampler = training_client.save_weights_and_get_sampling_client().result()
        sequences = sampler.sample(prompt=prompt, num_samples=8, sampling_params=sampling_params).result().sequences
        rewards = [sum(t % 8 == 0 for t in s.tokens) / len(s.tokens) for s in sequences]
        mean = sum(rewards) / len(rewards)
        mean_rewards.append(mean)
        datums = [_rl_datum(prompt, s, r - mean) for s, r in zip(sequences, rewards)]
        training_client.forward_backward(datums, loss_fn="importance_sampling")
        training_client.optim_step(adam).result()
    first, last = sum(mean_rewards[:3]) / 3, sum(mean_rewards[-3:]) / 3
    assert last > first + 0.25, mean_rewards
    service.close("success")


STEPS = 12


def test_client_futures_still_act_as_clients_with_a_warning(service: LocalServiceClient) -> None:
    """Tinker 0.38 keeps the pre-future style working (deprecated); cookbook recipes still use it."""
    future = service.create_lora_training_client(base_model="local:tiny", rank=4)
    with pytest.warns(FutureWarning, match=r"\.result\(\)"):
        tokenizer = future.get_tokenizer()
    assert tokenizer.eos_token_id is not None
    with pytest.warns(DeprecationWarning, match="name"):
        sampler_future = future.result().save_weights_and_get_sampling_client(name="step_0000")
    assert sampler_future.result().get_base_model() == "local:tiny"


@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU")
def test_one_rl_step_and_round_trip_on_cuda(tmp_path: Path) -> None:
    service = make_service_client(
        PolicyConfig(backend="local", base_model="local:tiny", device="cuda", log_dir=str(tmp_path))
    )
    training_client = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
    prompt = _prompt(training_client.get_tokenizer())
    sampler = training_client.save_weights_and_get_sampling_client().result()
    params = types.SamplingParams(max_tokens=8, seed=2, stop=[])
    sequences = sampler.sample(prompt=prompt, num_samples=4, sampling_params=params).result().sequences
    datums = [_rl_datum(prompt, s, adv) for s, adv in zip(sequences, [1.0, -1.0, 0.5, -0.5])]
    output = training_client.forward_backward(datums, loss_fn="importance_sampling").result()
    training_client.optim_step(types.AdamParams(learning_rate=1e-2)).result()
    ob_len = prompt.length - 1
    torch.testing.assert_close(
        output.loss_fn_outputs[0]["logprobs"].to_torch()[ob_len:], torch.tensor(sequences[0].logprobs), atol=1e-3, rtol=0
    )
    sampler_path = training_client.save_weights_for_sampler("cuda_step").result().path
    trained = training_client.save_weights_and_get_sampling_client().result()
    reloaded = service.create_sampling_client(model_path=sampler_path).result()
    a = trained.sample(prompt=prompt, num_samples=2, sampling_params=params).result().sequences
    b = reloaded.sample(prompt=prompt, num_samples=2, sampling_params=params).result().sequences
    assert [s.tokens for s in a] == [s.tokens for s in b]
    service.close("success")


def test_futures_can_be_awaited(service: LocalServiceClient) -> None:
    import asyncio

    async def run() -> types.SampleResponse:
        training_client = await service.create_lora_training_client(base_model="local:tiny", rank=4)
        sampler = await training_client.save_weights_and_get_sampling_client()
        prompt = _prompt(training_client.get_tokenizer())
        return await sampler.sample(prompt=prompt, num_samples=2, sampling_params=types.SamplingParams(max_tokens=3, stop=[]))

    response = asyncio.run(run())
    assert [len(s.tokens) for s in response.sequences] == [3, 3]


def test_checkpoints_keep_the_tiny_base_they_were_trained_on(tmp_path: Path) -> None:
    """A run resumed with another seed must still pair the adapter with its own tiny base weights."""
    service = _service(tmp_path, seed=3)
    training_client = service.create_lora_training_client(base_model="local:tiny", rank=4).result()
    prompt = _prompt(training_client.get_tokenizer())
    params = types.SamplingParams(max_tokens=5, seed=1, stop=[])
    path = training_client.save_weights_for_sampler("seeded").result().path
    expected = training_client.save_weights_and_get_sampling_client().result().sample(
        prompt=prompt, num_samples=1, sampling_params=params).result().sequences[0].logprobs
    other = _service(tmp_path, seed=9)
    got = other.create_sampling_client(model_path=path).result().sample(
        prompt=prompt, num_samples=1, sampling_params=params).result().sequences[0].logprobs
    assert got == expected
    other.close("success")
    service.close("success")


def test_requests_sent_together_decode_as_one_batch_and_match_alone(service: LocalServiceClient) -> None:
    sampler = service.create_sampling_client(base_model="local:tiny").result()
    tokenizer = sampler.get_tokenizer()
    texts = [PROMPT_TEXT, "import torch\nimport triton\n\n@triton.jit\ndef kernel(x_ptr, n):", "x"]
    prompts = [types.ModelInput.from_ints(tokenizer.encode(t, add_special_tokens=False)) for t in texts]
    assert len({p.length for p in prompts}) == 3  # different lengths: the batch is left-padded
    greedy = [types.SamplingParams(max_tokens=budget, temperature=0.0, stop=[]) for budget in (12, 5, 9)]

    def alone(index: int, **extra):
        return sampler.sample(prompt=prompts[index], num_samples=2, sampling_params=greedy[index], **extra).result()

    decoded: list[int] = []
    real_decode = sampler._decode
    sampler._decode = lambda jobs: (decoded.append(len(jobs)), real_decode(jobs))[1]
    with sampler.batched_sampling():
        futures = [sampler.sample(prompt=p, num_samples=2, sampling_params=g, include_prompt_logprobs=(i == 1))
                   for i, (p, g) in enumerate(zip(prompts, greedy))]
        assert not any(f.future().done() for f in futures)  # held until the block ends
    together = [f.result() for f in futures]
    assert decoded == [3]  # one decode for all three requests
    for index, response in enumerate(together):
        single = alone(index, include_prompt_logprobs=(index == 1))
        assert [len(s.tokens) for s in response.sequences] == [greedy[index].max_tokens] * 2  # each its own budget
        assert [s.tokens for s in response.sequences] == [s.tokens for s in single.sequences]
        for ours, theirs in zip(response.sequences, single.sequences):
            assert ours.logprobs == pytest.approx(theirs.logprobs, abs=1e-4)
    assert together[1].prompt_logprobs[0] is None
    assert together[1].prompt_logprobs[1:] == pytest.approx(alone(1, include_prompt_logprobs=True).prompt_logprobs[1:],
                                                            abs=1e-4)
    assert together[0].prompt_logprobs is None


def test_a_batch_that_fails_is_decoded_again_request_by_request(service: LocalServiceClient) -> None:
    sampler = service.create_sampling_client(base_model="local:tiny").result()
    prompt = _prompt(sampler.get_tokenizer())
    params = types.SamplingParams(max_tokens=4, temperature=0.0, stop=[])
    real_decode = sampler._decode

    def fails_together(jobs):
        if len(jobs) > 1:
            raise RuntimeError("out of memory together")
        if jobs[0].num_samples == 3:
            raise ValueError("this request alone")
        return real_decode(jobs)

    sampler._decode = fails_together
    with sampler.batched_sampling():
        good = sampler.sample(prompt=prompt, num_samples=2, sampling_params=params)
        bad = sampler.sample(prompt=prompt, num_samples=3, sampling_params=params)
    assert [len(s.tokens) for s in good.result().sequences] == [4, 4]
    with pytest.raises(ValueError, match="this request alone"):
        bad.result()


def test_a_padded_batch_with_non_finite_logits_is_refused(service: LocalServiceClient) -> None:
    from types import SimpleNamespace

    from kernelbench_rl.policy.local_sampling import SampleJob, decode

    tokenizer = service.create_sampling_client(base_model="local:tiny").result().get_tokenizer()

    def model(input_ids, attention_mask=None, **_):  # NaN wherever a pad could have spread it
        logits = torch.zeros(input_ids.shape[0], input_ids.shape[1], 8)
        if attention_mask is not None:
            logits[:, -1, 0] = float("nan")
        return SimpleNamespace(logits=logits, past_key_values=None)

    def job(tokens):
        return SampleJob(tokens, 1, types.SamplingParams(max_tokens=2, temperature=0.0), False, torch.Generator(),
                         set(), [], 2)

    with pytest.raises(FloatingPointError):
        decode(model, [job([1, 2, 3]), job([4])], torch.device("cpu"), tokenizer)
    alone = job([4])
    decode(model, [alone], torch.device("cpu"), tokenizer)
    assert [o.tokens for o in alone.outcomes] == [[0, 0]]


def _record_prefills(monkeypatch: pytest.MonkeyPatch, hide_reorder: bool = False) -> list[int]:
    """Rows of each prefill (a forward of more than one token) the decoder makes; with `hide_reorder`, its cache
    lacks reorder_cache."""
    from types import SimpleNamespace

    from kernelbench_rl.policy import local_sampling_client as local  # where the sampling client calls decode

    class Opaque:  # a cache the decoder cannot expand
        def __init__(self, cache):
            self.cache = cache

    rows: list[int] = []
    real_decode = local.decode

    def decode(model, jobs, device, tokenizer):
        def forward(input_ids, past_key_values=None, **kwargs):
            if input_ids.shape[1] > 1:
                rows.append(input_ids.shape[0])
            if isinstance(past_key_values, Opaque):
                past_key_values = past_key_values.cache
            output = model(input_ids=input_ids, past_key_values=past_key_values, **kwargs)
            if not hide_reorder:
                return output
            return SimpleNamespace(logits=output.logits, past_key_values=Opaque(output.past_key_values))

        return real_decode(forward, jobs, device, tokenizer)

    monkeypatch.setattr(local, "decode", decode)
    return rows


@pytest.mark.parametrize("hide_reorder", [False, True], ids=["expanded-cache", "prefill-per-sample"])
def test_a_prompt_is_prefilled_once_and_its_samples_match_alone(service: LocalServiceClient,
                                                                monkeypatch: pytest.MonkeyPatch,
                                                                hide_reorder: bool) -> None:
    sampler = service.create_sampling_client(base_model="local:tiny").result()
    tokenizer = sampler.get_tokenizer()
    texts = [PROMPT_TEXT, "import torch\nimport triton\n\n@triton.jit\ndef kernel(x_ptr, n):"]
    prompts = [types.ModelInput.from_ints(tokenizer.encode(t, add_special_tokens=False)) for t in texts]
    assert prompts[0].length != prompts[1].length  # the batch below is left-padded
    greedy = [types.SamplingParams(max_tokens=budget, temperature=0.0, stop=[]) for budget in (8, 6)]
    single = [sampler.sample(prompt=p, num_samples=1, sampling_params=g, include_prompt_logprobs=True).result()
              for p, g in zip(prompts, greedy)]
    prefills = _record_prefills(monkeypatch, hide_reorder)

    # One request of 4 greedy samples: one prefill row, then 4 rows decoding, each the num_samples=1 sequence.
    four = sampler.sample(prompt=prompts[0], num_samples=4, sampling_params=greedy[0],
                          include_prompt_logprobs=True).result()
    assert prefills == ([1, 4] if hide_reorder else [1])  # the fallback prefills again, one row per sample
    assert [s.tokens for s in four.sequences] == [single[0].sequences[0].tokens] * 4
    for sequence in four.sequences:
        assert sequence.logprobs == pytest.approx(single[0].sequences[0].logprobs, abs=1e-4)
    assert four.prompt_logprobs[1:] == pytest.approx(single[0].prompt_logprobs[1:], abs=1e-5)

    # Two requests together (3 and 2 samples, prompts of different lengths): one prefill row per request.
    prefills.clear()
    with sampler.batched_sampling():
        futures = [sampler.sample(prompt=p, num_samples=n, sampling_params=g, include_prompt_logprobs=True)
                   for p, n, g in zip(prompts, (3, 2), greedy)]
    together = [f.result() for f in futures]
    assert prefills == ([2, 5] if hide_reorder else [2])
    for response, alone, samples in zip(together, single, (3, 2)):
        assert [s.tokens for s in response.sequences] == [alone.sequences[0].tokens] * samples
        for sequence in response.sequences:
            assert sequence.logprobs == pytest.approx(alone.sequences[0].logprobs, abs=1e-4)
        assert response.prompt_logprobs[0] is None
        assert response.prompt_logprobs[1:] == pytest.approx(alone.prompt_logprobs[1:], abs=1e-4)
