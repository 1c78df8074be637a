"""The HTTP app of the KernelBench OpenEnv environment (see openenv_env.py for the contract).

Our routes come first: POST /reset, POST /step, GET /state, GET /health, with OpenEnv's request
and response shapes and episodes kept by id. OpenEnv's own server then adds /schema, /metadata and
the /ws session endpoint (its /reset and /step are shadowed by ours). Every caller mistake is a
4xx with one sentence in `detail`; evaluation runs in FastAPI's thread pool, so episodes of
different clients are evaluated at once by the one shared evaluator pool.
"""

from __future__ import annotations

from typing import Any

import kernelbench_rl.integrations.openenv_env  # noqa: F401 - first: it imports openenv quietly
from fastapi import Body, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.types import HealthResponse, ResetRequest, ResetResponse, StepRequest, StepResponse
from pydantic import ValidationError

from kernelbench_rl.integrations.openenv_env import (
    MAX_CODE_BYTES, EnvRequestError, KernelAction, KernelEnvironment, KernelEnvService, KernelObservation, KernelState,
)

# A body beyond this is refused before it is parsed (the code limit plus room for JSON escaping).
MAX_BODY_BYTES = 4 * MAX_CODE_BYTES


def _sentence(exc: ValidationError | RequestValidationError, prefix: str = "") -> str:
    """The first validation error as one sentence, e.g. `action.code: Field required.`"""
    errors = exc.errors()
    if not errors:
        return "The request is malformed."
    first = errors[0]
    where = ".".join(str(part) for part in first.get("loc", ()) if part != "body")
    message = str(first.get("msg", "invalid value")).rstrip(".")
    return f"Malformed request: {prefix}{where}: {message}." if where or prefix else f"Malformed request: {message}."


def _observation_payload(observation: KernelObservation) -> dict[str, Any]:
    data = observation.model_dump(exclude={"reward", "done"})
    return {"observation": data, "reward": observation.reward, "done": observation.done}


def create_app(service: KernelEnvService) -> FastAPI:
    app = FastAPI(title="kernelbench-rl OpenEnv environment",
                  description="KernelBench problems judged by kernelbench-rl's evaluator, over OpenEnv's HTTP contract.")
    app.state.service = service

    @app.exception_handler(EnvRequestError)
    async def _request_error(_: Request, exc: EnvRequestError) -> JSONResponse:
        return JSONResponse({"detail": str(exc)}, status_code=exc.status_code)

    @app.exception_handler(RequestValidationError)
    async def _malformed(_: Request, exc: RequestValidationError) -> JSONResponse:
        return JSONResponse({"detail": _sentence(exc)}, status_code=422)

    @app.middleware("http")
    async def _limit_body(request: Request, call_next: Any) -> Any:
        length = request.headers.get("content-length")
        if length and length.isdigit() and int(length) > MAX_BODY_BYTES:
            return JSONResponse({"detail": f"The request body is {length} bytes; the limit is {MAX_BODY_BYTES} bytes."},
                                status_code=413)
        return await call_next(request)

    @app.post("/reset", response_model=ResetResponse, tags=["Environment Control"])
    def reset(request: ResetRequest = Body(default_factory=ResetRequest)) -> dict[str, Any]:
        extra = request.model_extra or {}
        unknown = sorted(set(extra) - {"problem_id", "split", "max_turns"})
        if unknown:
            raise EnvRequestError(f"Unknown reset field {unknown[0]!r}; reset takes problem_id, seed, split, "
                                  "max_turns and episode_id.", 422)
        problem_id, split, max_turns = extra.get("problem_id"), extra.get("split", "train"), extra.get("max_turns")
        if problem_id is not None and not isinstance(problem_id, str):
            raise EnvRequestError("problem_id must be a string such as 'L1/19'.", 422)
        if not isinstance(split, str):
            raise EnvRequestError("split must be 'train' or 'holdout'.", 422)
        if max_turns is not None and (not isinstance(max_turns, int) or isinstance(max_turns, bool)):
            raise EnvRequestError("max_turns must be an integer.", 422)
        observation = service.reset(problem_id=problem_id, seed=request.seed, split=split,
                                    episode_id=request.episode_id, max_turns=max_turns)
        return _observation_payload(observation)

    @app.post("/step", response_model=StepResponse, tags=["Environment Control"])
    def step(request: StepRequest) -> dict[str, Any]:
        extra = request.model_extra or {}
        unknown = sorted(set(extra) - {"episode_id"})
        if unknown:
            raise EnvRequestError(f"Unknown step field {unknown[0]!r}; step takes action and episode_id.", 422)
        code = request.action.get("code")
        if isinstance(code, str) and len(code.encode("utf-8", "replace")) > MAX_CODE_BYTES:
            raise EnvRequestError(f"The code is {len(code.encode('utf-8', 'replace'))} bytes; "
                                  f"the limit is {MAX_CODE_BYTES} bytes.", 413)
        try:
            action = KernelAction.model_validate(request.action)
        except ValidationError as exc:
            raise EnvRequestError(_sentence(exc, "action."), 422) from None
        episode_id = extra.get("episode_id")
        if episode_id is not None and not isinstance(episode_id, str):
            raise EnvRequestError("episode_id must be the string that /reset returned.", 422)
        return _observation_payload(service.step(action, episode_id))

    @app.get("/state", response_model=KernelState, tags=["State Management"])
    def state(episode_id: str | None = None) -> KernelState:
        return service.state(episode_id)

    @app.get("/health", response_model=HealthResponse, tags=["Health"])
    def health() -> HealthResponse:
        return HealthResponse(status="healthy")

    # OpenEnv's server for /schema, /metadata and /ws (one KernelEnvironment per WebSocket session).
    HTTPEnvServer(lambda: KernelEnvironment(service), KernelAction, KernelObservation,
                  max_concurrent_envs=64).register_routes(app)
    return app
