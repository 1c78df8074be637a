"""The `tinker` backend: the real Tinker SDK, passed through.

Every call returns the SDK's own objects (futures of clients, TrainingClient, SamplingClient,
tinker.types responses). This module only adds our configuration: the API key comes from
TINKER_API_KEY (checked up front, with one sentence if missing), and the SDK client is created on
first use. Nothing here contacts the service to find out whether it is reachable: offline, the
SDK would block for minutes.

Going from the local backend to Tinker is one config change:

    export TINKER_API_KEY=tml-...
    kernelbench-rl train --config ... policy.backend=tinker policy.base_model=Qwen/Qwen3-8B
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Callable, Mapping
from typing import Any

from kernelbench_rl.errors import UserError
from kernelbench_rl.policy.config import TINKER_API_KEY_ENV, PolicyConfig

MISSING_KEY_MESSAGE = f"Set {TINKER_API_KEY_ENV} (a tml-... key) or choose policy.backend=local."


def _default_client_factory() -> Callable[..., Any]:
    import tinker

    return tinker.ServiceClient


class TinkerServiceClient:
    """A tinker.ServiceClient made on first use; its methods pass straight through.

    client_factory is called as client_factory(api_key=..., base_url=..., user_metadata=...),
    the SDK constructor's own keyword arguments; tests pass a stand-in.
    """

    def __init__(
        self,
        api_key: str,
        *,
        base_url: str | None = None,
        user_metadata: dict[str, str] | None = None,
        client_factory: Callable[..., Any] | None = None,
    ) -> None:
        if not api_key:
            raise UserError(MISSING_KEY_MESSAGE)
        if not api_key.startswith("tml-"):
            warnings.warn(f"{TINKER_API_KEY_ENV} does not start with 'tml-'; Tinker keys usually do.", stacklevel=2)
        self._api_key = api_key
        self._base_url = base_url
        self._user_metadata = user_metadata
        self._client_factory = client_factory
        self._sdk_client: Any | None = None

    @classmethod
    def from_environment(
        cls, config: PolicyConfig, *, client_factory: Callable[..., Any] | None = None
    ) -> TinkerServiceClient:
        return cls(
            os.environ.get(TINKER_API_KEY_ENV, ""),
            base_url=config.tinker_base_url,
            client_factory=client_factory,
        )

    @property
    def sdk(self) -> Any:
        """The underlying SDK ServiceClient (created now if it does not exist yet)."""
        if self._sdk_client is None:
            factory = self._client_factory or _default_client_factory()
            self._sdk_client = factory(
                api_key=self._api_key, base_url=self._base_url, user_metadata=self._user_metadata
            )
        return self._sdk_client

    # The calls kernelbench-rl makes, spelled out so the protocol is visible; anything else the
    # SDK offers is reachable through __getattr__ or .sdk.
    def create_lora_training_client(
        self,
        base_model: str,
        rank: int = 32,
        seed: int | None = None,
        train_mlp: bool = True,
        train_attn: bool = True,
        train_unembed: bool = True,
        user_metadata: dict[str, str] | None = None,
        optimizer: Any | None = None,
    ) -> Any:
        return self.sdk.create_lora_training_client(
            base_model=base_model,
            rank=rank,
            seed=seed,
            train_mlp=train_mlp,
            train_attn=train_attn,
            train_unembed=train_unembed,
            user_metadata=user_metadata,
            optimizer=optimizer,
        )

    def create_training_client_from_state(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
        optimizer: Any | None = None,
    ) -> Any:
        return self.sdk.create_training_client_from_state(
            path,
            base_model=base_model,
            user_metadata=user_metadata,
            weights_access_token=weights_access_token,
            optimizer=optimizer,
        )

    def create_training_client_from_state_with_optimizer(
        self,
        path: str,
        base_model: str | None = None,
        user_metadata: dict[str, str] | None = None,
        weights_access_token: str | None = None,
    ) -> Any:
        return self.sdk.create_training_client_from_state_with_optimizer(
            path,
            base_model=base_model,
            user_metadata=user_metadata,
            weights_access_token=weights_access_token,
        )

    def create_sampling_client(
        self,
        model_path: str | None = None,
        base_model: str | None = None,
        retry_config: Any | None = None,
        record_stability_info: bool = False,
    ) -> Any:
        return self.sdk.create_sampling_client(
            model_path=model_path,
            base_model=base_model,
            retry_config=retry_config,
            record_stability_info=record_stability_info,
        )

    def close(self, status: str, detail: str | None = None) -> Any:
        if self._sdk_client is None:
            # Never used: there is no session to finish, and creating one only to close it would
            # contact the service.
            from kernelbench_rl.policy.base import completed_future

            return completed_future(None)
        return self._sdk_client.close(status, detail)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_"):
            raise AttributeError(name)
        return getattr(self.sdk, name)


def describe(config: PolicyConfig) -> Mapping[str, Any]:
    """What the tinker backend would use, without contacting anything (for logs and `--dry-run`)."""
    return {
        "backend": "tinker",
        "base_model": config.base_model,
        "lora_rank": config.lora_rank,
        "base_url": config.tinker_base_url or "(SDK default)",
        "api_key_set": bool(os.environ.get(TINKER_API_KEY_ENV)),
    }
