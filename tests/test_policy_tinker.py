"""The tinker backend (against a stand-in honouring the SDK interface) and the shared call sequence.

test_cookbook_call_sequence runs the same code on the local backend and on the tinker backend;
the only difference between the two runs is the PolicyConfig (and, for tinker, the stand-in that
replaces tinker.ServiceClient because the service cannot be reached from tests).
"""

from __future__ import annotations

import inspect

import pytest
import tinker
import torch
from tinker import types
from tinker.types.tensor_data import TensorData

from kernelbench_rl.errors import UserError
from kernelbench_rl.policy import PolicyConfig, make_service_client, resolve_backend
from kernelbench_rl.policy.local import LocalSamplingClient, LocalServiceClient, LocalTrainingClient
from kernelbench_rl.policy.tinker_backend import TinkerServiceClient

try:
    from tests.tinker_standin import StandinSamplingClient, StandinServiceClient, StandinTrainingClient
except ImportError:  # tests/ is on sys.path instead of the repository root
    from tinker_standin import StandinSamplingClient, StandinServiceClient, StandinTrainingClient

GROUP_SIZE = 4


@pytest.fixture
def tinker_key(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    return "tml-test-key"


@pytest.fixture
def no_tinker_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)


def _service_for(backend: str, tmp_path, monkeypatch: pytest.MonkeyPatch):
    if backend == "local":
        config = PolicyConfig(backend="local", base_model="local:tiny", lora_rank=4, device="cpu", log_dir=str(tmp_path))
        return config, make_service_client(config)
    monkeypatch.setenv("TINKER_API_KEY", "tml-test-key")
    # The one config change: backend and a model Tinker offers.
    config = PolicyConfig(backend="tinker", base_model="Qwen/Qwen3-8B", lora_rank=32)
    return config, make_service_client(config, client_factory=StandinServiceClient)


@pytest.mark.parametrize("backend", ["local", "tinker"])
def test_cookbook_call_sequence(backend: str, tmp_path, monkeypatch: pytest.MonkeyPatch) -> None:
    config, service = _service_for(backend, tmp_path, monkeypatch)

    training_client = service.create_lora_training_client(base_model=config.base_model, rank=config.lora_rank).result()
    tokenizer = training_client.get_tokenizer()
    sampling_client = training_client.save_weights_and_get_sampling_client().result()
    sampling_params = types.SamplingParams(max_tokens=12, temperature=1.0, stop=[])
    prompts_P = [
        types.ModelInput.from_ints(tokenizer.encode(text, add_special_tokens=False))
        for text in ("def forward(self, x):", "import triton\n")
    ]
    # Submit every prompt first, then wait: the cookbook's pattern.
    futures_P = [sampling_client.sample(prompt=p, num_samples=GROUP_SIZE, sampling_params=sampling_params) for p in prompts_P]
    assert all(isinstance(f, tinker.APIFuture) for f in futures_P)

    datums_D: list[types.Datum] = []
    ob_lens_D: list[int] = []
    for future, prompt in zip(futures_P, prompts_P):
        result = future.result()
        assert isinstance(result, types.SampleResponse)
        assert len(result.sequences) == GROUP_SIZE
        rewards_G = []
        for sequence in result.sequences:
            assert len(sequence.tokens) == 12 and sequence.stop_reason == "length"
            assert sequence.logprobs is not None and len(sequence.logprobs) == len(sequence.tokens)
            assert all(lp <= 0.0 for lp in sequence.logprobs)
            rewards_G.append(sum(t % 2 == 0 for t in sequence.tokens) / len(sequence.tokens))
        mean_reward = sum(rewards_G) / len(rewards_G)
        for sequence, reward in zip(result.sequences, rewards_G):
            ob_len = prompt.length - 1
            model_input = prompt.append(types.EncodedTextChunk(tokens=sequence.tokens[:-1]))
            ob_lens_D.append(ob_len)
            datums_D.append(
                types.Datum(
                    model_input=model_input,
                    loss_fn_inputs={
                        "target_tokens": TensorData.from_torch(torch.tensor([0] * ob_len + sequence.tokens)),
                        "logprobs": TensorData.from_torch(torch.tensor([0.0] * ob_len + sequence.logprobs)),
                        "advantages": TensorData.from_torch(
                            torch.tensor([0.0] * ob_len + [reward - mean_reward] * (model_input.length - ob_len))
                        ),
                    },
                )
            )

    fwd_bwd_future = training_client.forward_backward(datums_D, loss_fn="importance_sampling")
    optim_future = training_client.optim_step(types.AdamParams(learning_rate=1e-3, beta1=0.9, beta2=0.95, eps=1e-8))
    fwd_bwd = fwd_bwd_future.result()
    optim_future.result()
    assert isinstance(fwd_bwd, types.ForwardBackwardOutput)
    assert len(fwd_bwd.loss_fn_outputs) == len(datums_D)
    for datum, ob_len, output in zip(datums_D, ob_lens_D, fwd_bwd.loss_fn_outputs):
        training_logprobs = output["logprobs"].to_torch()
        assert training_logprobs.shape == (datum.model_input.length,)
        sampled = datum.loss_fn_inputs["logprobs"].to_torch()
        # On-policy: the trainer's logprobs of the sampled tokens equal the sampler's.
        torch.testing.assert_close(training_logprobs[ob_len:], sampled[ob_len:], atol=1e-4, rtol=0)
    assert "loss:sum" in fwd_bwd.metrics

    state_path = training_client.save_state("step_0001").result().path
    sampler_path = training_client.save_weights_for_sampler("step_0001").result().path
    assert state_path != sampler_path

    resumed = service.create_training_client_from_state_with_optimizer(state_path).result()
    probe = datums_D[0]
    before = training_client.forward([probe], loss_fn="importance_sampling").result()
    after = resumed.forward([probe], loss_fn="importance_sampling").result()
    torch.testing.assert_close(after.loss_fn_outputs[0]["logprobs"].to_torch(), before.loss_fn_outputs[0]["logprobs"].to_torch())

    # The SDK's older in-place load still works (deprecated in 0.38, hence the warning).
    with pytest.warns(FutureWarning):
        training_client.load_state_with_optimizer(state_path).result()

    reloaded = service.create_sampling_client(model_path=sampler_path).result()
    params = types.SamplingParams(max_tokens=6, seed=7, stop=[])
    a = sampling_client.sample(prompt=prompts_P[0], num_samples=1, sampling_params=params).result()
    b = reloaded.sample(prompt=prompts_P[0], num_samples=1, sampling_params=params).result()
    # sampling_client is the pre-step snapshot; reloaded holds the trained weights.
    assert a.sequences[0].logprobs != b.sequences[0].logprobs
    service.close("success").result()


@pytest.mark.timeout(60)  # the SDK would block for minutes if anything tried to reach the service
def test_tinker_without_key_raises_user_error_at_once(no_tinker_key: None) -> None:
    with pytest.raises(UserError, match="TINKER_API_KEY") as raised:
        make_service_client(PolicyConfig(backend="tinker", base_model="Qwen/Qwen3-8B"))
    assert "policy.backend=local" in str(raised.value)


def test_auto_backend_follows_the_key_and_the_model(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("TINKER_API_KEY", raising=False)
    assert resolve_backend(PolicyConfig(backend="auto", base_model="Qwen/Qwen3-8B")) == "local"
    monkeypatch.setenv("TINKER_API_KEY", "tml-x")
    assert resolve_backend(PolicyConfig(backend="auto", base_model="Qwen/Qwen3-8B")) == "tinker"
    assert resolve_backend(PolicyConfig(backend="auto", base_model="local:tiny")) == "local"
    with pytest.raises(UserError, match="policy.backend"):
        resolve_backend(PolicyConfig(backend="modal"))  # type: ignore[arg-type]


def test_real_sdk_client_is_created_lazily_and_never_contacted(tinker_key: str) -> None:
    service = make_service_client(PolicyConfig(backend="tinker", base_model="Qwen/Qwen3-8B"))
    assert isinstance(service, TinkerServiceClient)
    assert service._sdk_client is None
    # Constructing the real SDK client sends nothing (the SDK opens its session on the first call).
    sdk = service.sdk
    assert isinstance(sdk, tinker.ServiceClient)
    assert sdk._session_holder is None
    # Closing a service that was never used finishes no session and contacts nothing.
    assert service.close("success").result() is None


def test_factory_receives_the_key_and_results_pass_through(tinker_key: str) -> None:
    created: list[StandinServiceClient] = []

    def factory(**kwargs):
        client = StandinServiceClient(**kwargs)
        created.append(client)
        return client

    service = make_service_client(
        PolicyConfig(backend="tinker", base_model="Qwen/Qwen3-8B", tinker_base_url="https://example.invalid"),
        client_factory=factory,
    )
    assert created == []  # nothing is built before the first call
    future = service.create_lora_training_client(base_model="Qwen/Qwen3-8B", rank=8)
    assert len(created) == 1 and created[0].api_key == tinker_key and created[0].base_url == "https://example.invalid"
    # The SDK's own future class comes back untouched; it still acts as the client (deprecated).
    assert isinstance(future, tinker.BackcompatTrainingClientFuture)
    assert isinstance(future.result(), StandinTrainingClient)
    with pytest.warns(FutureWarning):
        assert future.get_info().lora_rank == 8


def _public_methods(cls: type) -> dict[str, inspect.Signature]:
    return {
        name: inspect.signature(member)
        for name, member in vars(cls).items()
        if not name.startswith("_") and inspect.isfunction(member)
    }


def _parameters(signature: inspect.Signature) -> list[tuple[str, inspect._ParameterKind]]:
    return [(p.name, p.kind) for p in signature.parameters.values() if p.name != "self" and p.kind != p.VAR_KEYWORD]


@pytest.mark.parametrize(
    ("ours", "sdk"),
    [
        (StandinServiceClient, tinker.ServiceClient),
        (StandinTrainingClient, tinker.TrainingClient),
        (StandinSamplingClient, tinker.SamplingClient),
        (TinkerServiceClient, tinker.ServiceClient),
        (LocalServiceClient, tinker.ServiceClient),
        (LocalTrainingClient, tinker.TrainingClient),
        (LocalSamplingClient, tinker.SamplingClient),
    ],
)
def test_method_names_and_arguments_match_the_sdk(ours: type, sdk: type) -> None:
    sdk_methods = _public_methods(sdk)
    for name, signature in _public_methods(ours).items():
        if name in ("from_environment", "sdk", "step", "batched_sampling", "stop_sampling", "compute_tempered_logprobs"):
            continue  # our own helpers, not SDK methods
        assert name in sdk_methods, f"{ours.__name__}.{name} is not a {sdk.__name__} method"
        assert _parameters(signature) == _parameters(sdk_methods[name]), f"{ours.__name__}.{name} arguments differ"
