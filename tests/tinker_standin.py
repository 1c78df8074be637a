"""A stand-in for tinker.ServiceClient: the SDK's interface, with a toy model behind it.

Tinker has no offline or mock mode, so tests that exercise the `tinker` backend inject this class
in place of tinker.ServiceClient. It honours the SDK 0.38 interface: the same method and argument
names (a test compares signatures with the installed SDK), tinker.types requests and responses,
and the SDK's own future classes (client-creating calls return the SDK's
BackcompatTrainingClientFuture / BackcompatSamplingClientFuture; work calls an APIFuture).

Behind it sits a context-free unigram policy (one logit per vocabulary entry) trained with the
exact loss definitions Tinker documents, so requests are checked the way the service checks them
(required loss inputs, lengths) and save/load round trips are observable. Checkpoints live in a
process-wide dict keyed by tinker:// paths, like the service's storage.
"""

from __future__ import annotations

import itertools
import os
import uuid
import warnings
from collections.abc import Mapping
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, Literal

import numpy as np
import torch
from tinker import types
from tinker.lib.public_interfaces.api_future import APIFuture, AwaitableConcurrentFuture
from tinker.lib.public_interfaces.backcompat_sampling_client_future import BackcompatSamplingClientFuture
from tinker.lib.public_interfaces.backcompat_training_client_future import BackcompatTrainingClientFuture

from kernelbench_rl.policy.tiny import load_tokenizer

# The service's checkpoint storage: tinker path -> saved state.
CHECKPOINTS: dict[str, dict[str, Any]] = {}
_REQUIRED_INPUTS: dict[str, tuple[str, ...]] = {
    "cross_entropy": ("target_tokens",),
    "importance_sampling": ("target_tokens", "logprobs", "advantages"),
    "ppo": ("target_tokens", "logprobs", "advantages"),
    "cispo": ("target_tokens", "logprobs", "advantages"),
    "dro": ("target_tokens", "logprobs", "advantages"),
}


def _done(value: Any) -> AwaitableConcurrentFuture[Any]:
    future: ConcurrentFuture[Any] = ConcurrentFuture()
    future.set_result(value)
    return AwaitableConcurrentFuture(future)


class _ToyPolicy:
    """Unigram logits over the vocabulary, trained by Adam on Tinker's token-summed losses."""

    def __init__(self, vocab_size: int, seed: int) -> None:
        generator = torch.Generator().manual_seed(seed)
        self.logits = (0.01 * torch.randn(vocab_size, generator=generator)).requires_grad_(True)
        self.optimizer = torch.optim.AdamW([self.logits], lr=1e-4, eps=1e-12, weight_decay=0.0)
        self.steps = 0

    def log_probs(self) -> torch.Tensor:
        return torch.log_softmax(self.logits, dim=-1)

    def state(self) -> dict[str, Any]:
        return {
            "logits": self.logits.detach().clone(),
            "optimizer": self.optimizer.state_dict(),
            "steps": self.steps,
        }

    def load(self, state: Mapping[str, Any], with_optimizer: bool) -> None:
        with torch.no_grad():
            self.logits.copy_(state["logits"])
        if with_optimizer:
            self.optimizer.load_state_dict(state["optimizer"])
            self.steps = state["steps"]


class StandinSamplingClient:
    def __init__(self, base_model: str, tokenizer: Any, logits: torch.Tensor, seed: int,
                 optimizer_steps: int = 0, sample_log: list[int] | None = None) -> None:
        self._base_model = base_model
        self._tokenizer = tokenizer
        self._log_probs = torch.log_softmax(logits.detach().clone(), dim=-1)
        self._generator = torch.Generator().manual_seed(seed)
        self._sequence_ids = itertools.count()
        self.requests: list[dict[str, Any]] = []
        # For tests of asynchronous training: the optimizer steps these weights have seen, and the
        # service's log of it, one entry per sample call in call order.
        self.optimizer_steps = optimizer_steps
        self._sample_log = sample_log

    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
        topk_sample_logprobs: int = 0,
        target_prompt_logprobs: types.TensorData | None = None,
        prompt_alt_tokens_k: int = 0,
        prompt_logprobs_last_n: int | None = None,
    ) -> APIFuture[types.SampleResponse]:
        assert isinstance(prompt, types.ModelInput), "prompt must be a tinker.types.ModelInput"
        assert isinstance(sampling_params, types.SamplingParams), "sampling_params must be SamplingParams"
        assert num_samples >= 1
        assert prompt.length > 0
        self.requests.append({"prompt": prompt.to_ints(), "num_samples": num_samples, "params": sampling_params})
        if self._sample_log is not None:
            self._sample_log.append(self.optimizer_steps)
        generator = (
            torch.Generator().manual_seed(sampling_params.seed)
            if sampling_params.seed is not None
            else self._generator
        )
        eos = self._tokenizer.eos_token_id
        stop = sampling_params.stop
        stop_ids = set() if stop == [] else {eos} | {s for s in (stop or []) if isinstance(s, int)}
        max_tokens = sampling_params.max_tokens or 16
        temperature = max(sampling_params.temperature, 1e-6)
        probabilities = torch.softmax(self._log_probs / temperature, dim=-1)
        sequences = []
        for _ in range(num_samples):
            tokens: list[int] = []
            reason: Literal["length", "stop"] = "length"
            for _ in range(max_tokens):
                token = int(torch.multinomial(probabilities, 1, generator=generator))
                tokens.append(token)
                if token in stop_ids:
                    reason = "stop"
                    break
            sequences.append(
                types.SampledSequence(
                    stop_reason=reason,
                    sequence_id=f"standin-{next(self._sequence_ids)}",
                    tokens_np=np.asarray(tokens, dtype=np.int32),
                    logprobs_np=self._log_probs[tokens].numpy().astype(np.float32),
                )
            )
        return _done(types.SampleResponse(sequences=sequences))

    def compute_logprobs(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> APIFuture[list[float | None]]:
        tokens = prompt.to_ints()
        return _done([None] + [float(self._log_probs[t]) for t in tokens[1:]])

    def get_tokenizer(self) -> Any:
        return self._tokenizer

    def get_base_model(self) -> str:
        return self._base_model


class StandinTrainingClient:
    def __init__(self, service: StandinServiceClient, base_model: str, rank: int, seed: int) -> None:
        self._service = service
        self._base_model = base_model
        self._rank = rank
        self.model_id = f"standin-run-{uuid.uuid4().hex[:8]}"
        service.training_clients.append(self)
        self._policy = _ToyPolicy(len(service._tokenizer), seed)
        self.requests: list[tuple[str, dict[str, Any]]] = []

    def forward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        return _done(self._loss(data, loss_fn, loss_fn_config, backward=False))

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]:
        return _done(self._loss(data, loss_fn, loss_fn_config, backward=True))

    def _loss(
        self,
        data: list[types.Datum],
        loss_fn: str,
        loss_fn_config: Mapping[str, float | str] | None,
        backward: bool,
    ) -> types.ForwardBackwardOutput:
        if not data:
            raise ValueError("No data provided")
        if loss_fn not in _REQUIRED_INPUTS:
            raise ValueError(f"unsupported loss_fn {loss_fn}")
        self.requests.append(("forward_backward" if backward else "forward", {"n": len(data), "loss_fn": loss_fn}))
        config = dict(loss_fn_config or {})
        log_probs = self._policy.log_probs()
        total = torch.zeros(())
        outputs = []
        for datum in data:
            assert isinstance(datum, types.Datum), "data must be tinker.types.Datum"
            length = datum.model_input.length
            for key in _REQUIRED_INPUTS[loss_fn]:
                assert key in datum.loss_fn_inputs, f"{loss_fn} needs loss_fn_inputs[{key!r}]"
            for key, value in datum.loss_fn_inputs.items():
                assert isinstance(value, types.TensorData)
                assert value.shape == [length], f"loss_fn_inputs[{key!r}] shape {value.shape} != [{length}]"
            targets = datum.loss_fn_inputs["target_tokens"].to_torch().long()
            logp = log_probs[targets]
            if loss_fn == "cross_entropy":
                weights = datum.loss_fn_inputs.get("weights")
                w = weights.to_torch().float() if weights is not None else torch.ones_like(logp)
                loss = -(w * logp).sum()
            else:
                q = datum.loss_fn_inputs["logprobs"].to_torch().float()
                advantages = datum.loss_fn_inputs["advantages"].to_torch().float()
                ratio = torch.exp(logp - q)
                if loss_fn == "ppo":
                    clipped = ratio.clamp(
                        float(config.get("clip_low_threshold", 0.8)), float(config.get("clip_high_threshold", 1.2))
                    )
                    loss = -torch.min(ratio * advantages, clipped * advantages).sum()
                else:
                    loss = -(ratio * advantages).sum()
            total = total + loss
            outputs.append({"logprobs": types.TensorData.from_torch(logp.detach())})
        if backward:
            total.backward()
        return types.ForwardBackwardOutput(
            loss_fn_output_type="ArrayRecord", loss_fn_outputs=outputs, metrics={"loss:sum": float(total.detach())}
        )

    def optim_step(
        self,
        optim_params: types.OptimParams | None = None,
        *,
        adam_params: types.AdamParams | None = None,
    ) -> APIFuture[types.OptimStepResponse]:
        params = optim_params if optim_params is not None else adam_params
        if not isinstance(params, types.AdamParams):
            raise TypeError("Expected AdamParams or OptimParamsBase")
        self.requests.append(("optim_step", {"learning_rate": params.learning_rate, "beta1": params.beta1,
                                             "beta2": params.beta2, "eps": params.eps}))
        for group in self._policy.optimizer.param_groups:
            group.update(lr=params.learning_rate, betas=(params.beta1, params.beta2), eps=params.eps)
        self._policy.optimizer.step()
        self._policy.optimizer.zero_grad(set_to_none=True)
        self._policy.steps += 1
        return _done(types.OptimStepResponse(metrics={}))

    def _save(self, kind: str, name: str, overwrite: bool, ttl_seconds: int | None) -> str:
        path = f"tinker://{self.model_id}/{kind}/{name}"
        if path in CHECKPOINTS and not overwrite:
            raise ValueError(f"checkpoint {path} exists")
        if ttl_seconds is not None and not 3600 <= ttl_seconds <= 10 * 365 * 24 * 3600:
            raise ValueError("ttl_seconds must be between 1 hour and 10 years")
        CHECKPOINTS[path] = {
            **self._policy.state(),
            "kind": kind,
            "base_model": self._base_model,
            "rank": self._rank,
            "ttl_seconds": ttl_seconds,
        }
        return path

    def save_state(
        self,
        name: str,
        ttl_seconds: int | None = None,
        overwrite: bool = False,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsResponse]:
        return _done(types.SaveWeightsResponse(path=self._save("weights", name, overwrite, ttl_seconds)))

    def save_weights_for_sampler(
        self,
        name: str,
        ttl_seconds: int | None = None,
        user_metadata: dict[str, str] | None = None,
    ) -> APIFuture[types.SaveWeightsForSamplerResponse]:
        return _done(types.SaveWeightsForSamplerResponse(path=self._save("sampler_weights", name, False, ttl_seconds)))

    def _load(self, path: str, with_optimizer: bool) -> APIFuture[types.LoadWeightsResponse]:
        if path not in CHECKPOINTS:
            raise ValueError(f"no checkpoint at {path}")
        self._policy.load(CHECKPOINTS[path], with_optimizer)
        return _done(types.LoadWeightsResponse(path=path, model_id=self.model_id))

    def load_state(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        warnings.warn("load_state is deprecated", FutureWarning, stacklevel=2)
        return self._load(path, with_optimizer=False)

    def load_state_with_optimizer(
        self, path: str, weights_access_token: str | None = None
    ) -> APIFuture[types.LoadWeightsResponse]:
        warnings.warn("load_state_with_optimizer is deprecated", FutureWarning, stacklevel=2)
        return self._load(path, with_optimizer=True)

    def get_info(self) -> types.GetInfoResponse:
        return types.GetInfoResponse(
            model_data=types.ModelData(arch="standin", model_name=self._base_model),
            model_id=self.model_id,
            is_lora=True,
            lora_rank=self._rank,
            model_name=self._base_model,
        )

    def get_tokenizer(self) -> Any:
        return self._service._tokenizer

    def create_sampling_client(
        self,
        model_path: str,
        retry_config: Any | None = None,
        record_stability_info: bool = False,
    ) -> BackcompatSamplingClientFuture:
        return self._service.create_sampling_client(model_path=model_path)

    def save_weights_and_get_sampling_client(
        self,
        name: str | None = None,
        retry_config: Any | None = None,
        record_stability_info: bool = False,
        kind: types.SamplingClientKind = "snapshot",
    ) -> BackcompatSamplingClientFuture:
        client = StandinSamplingClient(
            self._base_model, self._service._tokenizer, self._policy.logits, next(self._service._seeds),
            self._policy.steps, self._service.sample_log,
        )
        return BackcompatSamplingClientFuture(_done(client))


class StandinServiceClient:
    """Drop-in for tinker.ServiceClient (same constructor and methods)."""

    def __init__(
        self,
        user_metadata: dict[str, str] | None = None,
        project_id: str | None = None,
        *,
        display_name: str | None = None,
        base_url: str | None = None,
        api_key: str | None = None,
        default_headers_overrides: Mapping[str, str] | None = None,
        **kwargs: Any,
    ) -> None:
        self.api_key = api_key if api_key is not None else os.environ.get("TINKER_API_KEY")
        self.base_url = base_url
        self.user_metadata = user_metadata
        # The real SDK downloads the model's Hugging Face tokenizer; offline, the tiny one stands in.
        self._tokenizer = load_tokenizer("local:tiny")
        self._seeds = itertools.count(1234)
        self.closed_with: str | None = None
        self.training_clients: list[StandinTrainingClient] = []  # every client made, for tests to inspect
        self.sample_log: list[int] = []  # per sample call: the optimizer steps of the weights that sampled

    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> BackcompatTrainingClientFuture:
        assert any([train_mlp, train_attn, train_unembed])
        client = StandinTrainingClient(self, base_model, rank, seed if seed is not None else 0)
        return BackcompatTrainingClientFuture(_done(client))

    def _from_state(self, path: str, base_model: str | None, with_optimizer: bool) -> BackcompatTrainingClientFuture:
        if path not in CHECKPOINTS:
            raise ValueError(f"no checkpoint at {path}")
        saved = CHECKPOINTS[path]
        client = StandinTrainingClient(self, base_model or saved["base_model"], saved["rank"], 0)
        client._policy.load(saved, with_optimizer)
        return BackcompatTrainingClientFuture(_done(client))

    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: types.OptimizerConfig | None = None,
    ) -> BackcompatTrainingClientFuture:
        return self._from_state(path, base_model, with_optimizer=False)

    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> BackcompatTrainingClientFuture:
        return self._from_state(path, base_model, with_optimizer=True)

    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any | None = None,
        record_stability_info: bool = False,
    ) -> BackcompatSamplingClientFuture:
        if model_path is None and base_model is None:
            raise ValueError("Either model_path or base_model must be provided")
        if model_path is not None:
            if model_path not in CHECKPOINTS:
                raise ValueError(f"no checkpoint at {model_path}")
            saved = CHECKPOINTS[model_path]
            logits, name, steps = saved["logits"], base_model or saved["base_model"], saved["steps"]
        else:
            assert base_model is not None
            logits, name, steps = _ToyPolicy(len(self._tokenizer), 0).logits, base_model, 0
        client = StandinSamplingClient(name, self._tokenizer, logits, next(self._seeds), steps, self.sample_log)
        return BackcompatSamplingClientFuture(_done(client))

    def close(
        self,
        status: Literal["success", "errored", "interrupted"],
        detail: str | None = None,
    ) -> AwaitableConcurrentFuture[None]:
        self.closed_with = status
        return _done(None)
