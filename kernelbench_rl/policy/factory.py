"""The one entry point that builds a service client for a policy configuration (config.py).

    service = make_service_client(PolicyConfig(backend="local"))          # offline, CPU or CUDA
    service = make_service_client(PolicyConfig(backend="tinker", base_model="Qwen/Qwen3-8B"))

Switching from the local backend to Tinker is one config change (`policy.backend=tinker`, with
`TINKER_API_KEY` exported and a base_model Tinker offers); the calling code is the same.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kernelbench_rl.policy.base import ServiceClientProtocol
from kernelbench_rl.policy.config import BACKENDS, TINKER_API_KEY_ENV, Backend, PolicyConfig, resolve_backend

__all__ = ["BACKENDS", "TINKER_API_KEY_ENV", "Backend", "PolicyConfig", "make_service_client", "resolve_backend"]


def make_service_client(
    config: PolicyConfig | None = None,
    *,
    client_factory: Callable[..., Any] | None = None,
) -> ServiceClientProtocol:
    """Build the service client for `config`; nothing here contacts any service.

    client_factory replaces tinker.ServiceClient (tests pass a stand-in); the local backend
    ignores it.
    """
    config = config or PolicyConfig()
    backend = resolve_backend(config)
    if backend == "tinker":
        from kernelbench_rl.policy.tinker_backend import TinkerServiceClient

        return TinkerServiceClient.from_environment(config, client_factory=client_factory)
    from kernelbench_rl.policy.local import LocalServiceClient

    return LocalServiceClient(config)
