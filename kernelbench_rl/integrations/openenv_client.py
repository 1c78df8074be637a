"""Python clients of the KernelBench OpenEnv server.

`KernelEnvClient` speaks the plain HTTP routes (one episode per client object, its id kept for
you); `KernelEnvWSClient` is OpenEnv's own `EnvClient` over the server's /ws session endpoint.
Both return OpenEnv's `StepResult` holding a typed `KernelObservation`.
"""

from __future__ import annotations

from typing import Any

import kernelbench_rl.integrations.openenv_env  # noqa: F401 - first: it imports openenv quietly
import httpx
from openenv.core.client_types import StepResult
from openenv.core.env_client import EnvClient

from kernelbench_rl.integrations.openenv_env import KernelAction, KernelObservation, KernelState


class EnvServerUnreachable(ConnectionError):
    """No answer from the server at all (nothing listens there, the connection dropped, it timed out)."""

    def __init__(self, base_url: str, reason: str) -> None:
        super().__init__(f"Could not reach the env server at {base_url} ({reason}); start one with "
                         f"`kernelbench-rl env serve` or fix the URL.")


class EnvServerError(RuntimeError):
    """The server refused a request (a 4xx): `status_code` and the server's one-sentence reason."""

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(f"{status_code}: {message}")
        self.status_code = status_code
        self.message = message


def _step_result(payload: dict[str, Any]) -> StepResult[KernelObservation]:
    data = dict(payload.get("observation", {}))
    data["reward"] = payload.get("reward")
    data["done"] = bool(payload.get("done", False))
    return StepResult(observation=KernelObservation(**data), reward=payload.get("reward"), done=data["done"])


class KernelEnvClient:
    """HTTP client: `reset(problem_id=..., seed=..., split=...)`, `step(action or code)`, `state()`."""

    def __init__(self, base_url: str, timeout_s: float = 600.0) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, timeout=timeout_s)
        self.episode_id: str | None = None

    def _call(self, method: str, path: str, **kwargs: Any) -> dict[str, Any]:
        try:
            response = self._http.request(method, path, **kwargs)
        except httpx.TransportError as exc:
            raise EnvServerUnreachable(self.base_url, type(exc).__name__) from None
        if response.status_code >= 400:
            try:
                detail = response.json().get("detail", response.text)
            except ValueError:
                detail = response.text
            raise EnvServerError(response.status_code, str(detail))
        return response.json()

    def health(self) -> dict[str, Any]:
        return self._call("GET", "/health")

    def reset(self, problem_id: str | None = None, seed: int | None = None, split: str = "train",
              max_turns: int | None = None) -> StepResult[KernelObservation]:
        body: dict[str, Any] = {"split": split}
        if problem_id is not None:
            body["problem_id"] = problem_id
        if seed is not None:
            body["seed"] = seed
        if max_turns is not None:
            body["max_turns"] = max_turns
        result = _step_result(self._call("POST", "/reset", json=body))
        self.episode_id = result.observation.episode_id
        return result

    def step(self, action: KernelAction | str) -> StepResult[KernelObservation]:
        if isinstance(action, str):
            action = KernelAction(code=action)
        body: dict[str, Any] = {"action": action.model_dump(exclude_none=True, exclude={"metadata"})}
        if self.episode_id is not None:
            body["episode_id"] = self.episode_id
        return _step_result(self._call("POST", "/step", json=body))

    def state(self) -> KernelState:
        params = {"episode_id": self.episode_id} if self.episode_id else None
        return KernelState(**self._call("GET", "/state", params=params))

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> KernelEnvClient:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class KernelEnvWSClient(EnvClient[KernelAction, KernelObservation, KernelState]):
    """OpenEnv's WebSocket client for this environment (a session per connection)."""

    def _step_payload(self, action: KernelAction) -> dict[str, Any]:
        return action.model_dump(exclude_none=True)

    def _parse_result(self, payload: dict[str, Any]) -> StepResult[KernelObservation]:
        return _step_result(payload)

    def _parse_state(self, payload: dict[str, Any]) -> KernelState:
        return KernelState(**payload)


def require_env_server(base_url: str) -> None:
    """Raise EnvServerUnreachable (one sentence) unless a server answers /health at base_url: a check to make
    before a long job that needs it, so a wrong URL fails at once instead of inside the job."""
    with KernelEnvClient(base_url, timeout_s=10.0) as client:
        client.health()
