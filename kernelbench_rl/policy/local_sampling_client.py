"""The local backend's sampling client (Tinker's SamplingClient, locally): a fixed snapshot of LoRA weights, or
none, on a base model, sampling through its service's decoder (policy/local.py: LocalServiceClient, which makes
these clients and hands them its engine, its worker thread and its device).
"""

from __future__ import annotations

import contextlib
import itertools
from typing import Any

import torch
from tinker import types
from tinker.lib.public_interfaces.api_future import APIFuture

from kernelbench_rl.policy.local_sampling import SampleJob, decode, logprobs_of, response, stop_conditions

DEFAULT_MAX_TOKENS = 256


def decode_alone(job: SampleJob, client: LocalSamplingClient) -> None:
    """Decode `job` alone; its future gets the response, or the exception that stopped it."""
    try:
        client._decode([job])
        job.future.set_result(client._response(job))
    except Exception as exc:  # noqa: BLE001 - the caller's future carries it
        job.future.set_exception(exc)


class LocalSamplingClient:
    """Tinker's SamplingClient, locally: a fixed snapshot of LoRA weights (or none) on a base model."""

    def __init__(
        self, service: Any, base_model: str, snapshot: Any, seed: int
    ) -> None:
        self._service = service
        self._base_model = base_model
        self._snapshot = snapshot
        self._base_seed = snapshot.base_seed if snapshot is not None else service.config.seed
        self._generator_seed = seed
        self._generator: torch.Generator | None = None
        self._sequence_ids = itertools.count()

    def get_tokenizer(self) -> Any:
        return self._service._tokenizer(self._base_model)

    def get_base_model(self) -> str:
        return self._base_model

    def batched_sampling(self) -> contextlib.AbstractContextManager[None]:
        """Not in Tinker's SDK, the local backend's own: `sample` calls this thread makes inside the block are
        decoded together when it ends (see local_sampling.py), so none of their futures may be waited on inside it.
        The rollout runner uses it where a policy has it."""
        return self._service._batched_sampling()

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
        unsupported = {
            "topk_prompt_logprobs": topk_prompt_logprobs,
            "topk_sample_logprobs": topk_sample_logprobs,
            "target_prompt_logprobs": target_prompt_logprobs,
            "prompt_alt_tokens_k": prompt_alt_tokens_k,
        }
        asked = [name for name, value in unsupported.items() if value]
        if asked:
            raise NotImplementedError(f"The local backend does not compute {', '.join(asked)}.")
        prompt_tokens = prompt.to_ints()
        if not prompt_tokens:
            raise ValueError("The prompt is empty.")
        if num_samples < 1:
            raise ValueError("num_samples must be at least 1.")
        return self._service._submit_sample(self, prompt_tokens, num_samples, sampling_params, include_prompt_logprobs)

    def compute_logprobs(
        self, prompt: types.ModelInput, prompt_logprobs_last_n: int | None = None
    ) -> APIFuture[list[float | None]]:
        """Each token's logprob under the model (Tinker's call, its signature)."""
        return self.compute_tempered_logprobs(prompt, 1.0, prompt_logprobs_last_n)

    def compute_tempered_logprobs(
        self, prompt: types.ModelInput, temperature: float, prompt_logprobs_last_n: int | None = None
    ) -> APIFuture[list[float | None]]:
        """The local backend's own: each token's logprob under the tempered distribution the sampler draws from at
        `temperature` (logits / temperature)."""
        tokens = prompt.to_ints()

        def work() -> list[float | None]:
            engine = self._service._engine(self._base_model, self._base_seed)
            with torch.no_grad(), engine.model_for(self._snapshot) as model:
                scored = _prompt_logprobs(model, tokens, self._service.device, temperature)
            if prompt_logprobs_last_n is not None:
                cut = len(scored) - prompt_logprobs_last_n
                scored = [None] * cut + scored[cut:]
            return scored

        return self._service._submit(work)

    # -- generation ------------------------------------------------------------------------
    def _next_generator(self, params: types.SamplingParams, device: torch.device) -> torch.Generator:
        if params.seed is not None:
            generator = torch.Generator(device=device)
            generator.manual_seed(int(params.seed))
            return generator
        if self._generator is None:
            self._generator = torch.Generator(device=device)
            self._generator.manual_seed(self._generator_seed)
        return self._generator

    def _job(self, prompt_tokens: list[int], num_samples: int, params: types.SamplingParams,
             include_prompt_logprobs: bool) -> SampleJob:
        """The request as a job for the decoder."""
        stop_token_ids, stop_strings = stop_conditions(params.stop, self.get_tokenizer())
        max_tokens = DEFAULT_MAX_TOKENS if params.max_tokens is None else int(params.max_tokens)
        return SampleJob(prompt_tokens, num_samples, params, include_prompt_logprobs,
                         self._next_generator(params, self._service.device), stop_token_ids, stop_strings, max_tokens,
                         stopped=self._service._sampling_stopped.is_set)

    def _decode(self, jobs: list[SampleJob]) -> None:
        """Decode jobs of this client's weights together (one batch), filling their outcomes."""
        engine = self._service._engine(self._base_model, self._base_seed)
        with torch.no_grad(), engine.model_for(self._snapshot) as model:
            decode(model, jobs, self._service.device, self.get_tokenizer())

    def _response(self, job: SampleJob) -> types.SampleResponse:
        return response(job, lambda: f"local-{id(self):x}-{next(self._sequence_ids)}")


def _prompt_logprobs(model: Any, tokens: list[int], device: torch.device,
                     temperature: float = 1.0) -> list[float | None]:
    if len(tokens) < 2:
        return [None] * len(tokens)
    input_ids = torch.tensor([tokens], dtype=torch.long, device=device)
    logits = model(input_ids=input_ids).logits[0, :-1].float()
    return [None, *logprobs_of(logits / temperature, input_ids[0, 1:])]
