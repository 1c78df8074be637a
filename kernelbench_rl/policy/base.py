"""The policy protocol: the subset of the Tinker SDK (0.38) that kernelbench-rl calls.

Both backends satisfy these protocols: `tinker` (the real SDK's own clients, passed through) and
`local` (transformers + peft). Method and argument names, return types and future semantics are
the SDK's, so code written against one runs unchanged on the other:

- Client-creating calls (`create_lora_training_client`, `create_sampling_client`,
  `create_training_client_from_state_with_optimizer`, `save_weights_and_get_sampling_client`)
  return a future of the client: call `.result()` (or `await` it). As in the SDK, the future
  can still be used directly as the client, with a FutureWarning.
- Work calls (`sample`, `forward_backward`, `optim_step`, `save_state`, ...) return an
  `APIFuture` (`tinker.APIFuture`): `.result()`, `await`, `.future()`.
- Data types are `tinker.types` (ModelInput, Datum, TensorData, SamplingParams, AdamParams,
  SampleResponse, ForwardBackwardOutput, ...).
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from concurrent.futures import Future as ConcurrentFuture
from typing import Any, Generic, Literal, Protocol, TypeVar, runtime_checkable

from tinker import types
from tinker.lib.public_interfaces.api_future import APIFuture, AwaitableConcurrentFuture

T = TypeVar("T")
C = TypeVar("C")

SessionStatus = Literal["success", "errored", "interrupted"]


def completed_future(value: T) -> AwaitableConcurrentFuture[T]:
    """An already finished SDK future holding `value`."""
    future: ConcurrentFuture[T] = ConcurrentFuture()
    future.set_result(value)
    return AwaitableConcurrentFuture(future)


class ClientFuture(APIFuture[C], Generic[C]):
    """A future of a client that, like the SDK's Backcompat*ClientFuture, also acts as the client.

    Preferred use: `client = future.result()` (or `await future`). Using the future itself as the
    client forwards every public attribute to the finished client with a FutureWarning, exactly
    the SDK's deprecated-but-working behaviour, so cookbook-style code runs on either backend.
    """

    def __init__(self, future: APIFuture[C]) -> None:
        self._inner = future

    def result(self, timeout: float | None = None) -> C:
        return self._inner.result(timeout)

    async def result_async(self, timeout: float | None = None) -> C:
        return await self._inner.result_async(timeout)

    def future(self) -> ConcurrentFuture[C]:
        return self._inner.future()

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        warnings.warn(
            f"Using `.{name}` on the future returned by a client-creation method is deprecated "
            "(as in the Tinker SDK); call .result() on the future to get the client first.",
            FutureWarning,
            stacklevel=2,
        )
        return getattr(self.result(), name)

    def __repr__(self) -> str:
        state = "done" if self.future().done() else "pending"
        return f"<ClientFuture {state}>"


@runtime_checkable
class SamplingClientProtocol(Protocol):
    def sample(
        self,
        prompt: types.ModelInput,
        num_samples: int,
        sampling_params: types.SamplingParams,
        include_prompt_logprobs: bool = False,
        topk_prompt_logprobs: int = 0,
    ) -> APIFuture[types.SampleResponse]: ...

    def compute_logprobs(self, prompt: types.ModelInput) -> APIFuture[list[float | None]]: ...

    def get_tokenizer(self) -> Any: ...

    def get_base_model(self) -> str: ...


@runtime_checkable
class TrainingClientProtocol(Protocol):
    def forward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]: ...

    def forward_backward(
        self,
        data: list[types.Datum],
        loss_fn: types.LossFnType,
        loss_fn_config: Mapping[str, float | str] | None = None,
    ) -> APIFuture[types.ForwardBackwardOutput]: ...

    def optim_step(self, optim_params: types.AdamParams | None = None) -> APIFuture[types.OptimStepResponse]: ...

    def save_state(
        self, name: str, ttl_seconds: int | None = None, overwrite: bool = False
    ) -> APIFuture[types.SaveWeightsResponse]: ...

    def save_weights_for_sampler(
        self, name: str, ttl_seconds: int | None = None
    ) -> APIFuture[types.SaveWeightsForSamplerResponse]: ...

    def save_weights_and_get_sampling_client(self) -> APIFuture[Any]: ...

    def create_sampling_client(self, model_path: str) -> APIFuture[Any]: ...

    def get_tokenizer(self) -> Any: ...

    def get_info(self) -> types.GetInfoResponse: ...


@runtime_checkable
class ServiceClientProtocol(Protocol):
    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
    ) -> APIFuture[Any]: ...

    def create_training_client_from_state(self, path: str) -> APIFuture[Any]: ...

    def create_training_client_from_state_with_optimizer(self, path: str) -> APIFuture[Any]: ...

    def create_sampling_client(
        self, model_path: str | None = None, base_model: str | None = None
    ) -> APIFuture[Any]: ...

    def close(self, status: SessionStatus, detail: str | None = None) -> APIFuture[None]: ...
