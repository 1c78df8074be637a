"""The HTTP app of the KernelBench OpenEnv environment (see openenv_env.py for the contract).

Our routes come first: POST /reset, POST /step, GET /state, GET /health, with OpenEnv's request
and response shapes and episodes kept by id. OpenEnv's own server then adds /schema, /metadata and
the /ws session endpoint (its /reset and /step are shadowed by ours). Every caller mistake is a
4xx with one sentence in `detail`; evaluation runs in FastAPI's thread pool, so episodes of
different clients are evaluated at once by the one shared evaluator pool.
"""

from __future__ import annotations

import json
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


class BoundedRequests:
    """ASGI middleware: every HTTP body is bounded while it streams, and WebSocket frames must be text.

    A body announced past the limit (Content-Length) is refused at once; one sent without its length
    (chunked) is read up to the limit and refused as soon as it passes it, never read whole. A binary
    WebSocket frame gets an error frame saying what to send instead, and the session goes on.
    """

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES) -> None:
        self.app = app
        self.limit = limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            await self._http(scope, receive, send)
        elif scope["type"] == "websocket":
            await self.app(scope, self._text_frames(receive, send), send)
        else:
            await self.app(scope, receive, send)

    async def _refuse(self, send: Any, detail: str) -> None:
        body = json.dumps({"detail": detail}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()),
                                (b"connection", b"close")]})
        await send({"type": "http.response.body", "body": body})

    async def _http(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        length = dict(scope.get("headers") or []).get(b"content-length", b"")
        if length.isdigit() and int(length) > self.limit:
            await self._refuse(send, f"The request body is {int(length)} bytes; the limit is {self.limit} bytes.")
            return
        chunks: list[bytes] = []
        size = 0
        first: dict[str, Any] | None = None
        while True:
            message = await receive()
            if message["type"] != "http.request":  # the client went away: the app sees that
                first = message
                break
            body = message.get("body", b"")
            size += len(body)
            if size > self.limit:
                await self._refuse(send, f"The request body passed {self.limit} bytes (the limit) before its end; "
                                         "send less.")
                return
            chunks.append(body)
            if not message.get("more_body"):
                break
        replayed = False

        async def replay() -> dict[str, Any]:
            nonlocal replayed
            if not replayed:
                replayed = True
                return first or {"type": "http.request", "body": b"".join(chunks), "more_body": False}
            return await receive()

        await self.app(scope, replay, send)

    def _text_frames(self, receive: Any, send: Any) -> Any:
        async def text_only() -> dict[str, Any]:
            while True:
                message = await receive()
                if message["type"] != "websocket.receive" or message.get("text") is not None:
                    return message
                size = len(message.get("bytes") or b"")
                await send({"type": "websocket.send", "text": json.dumps({"type": "error", "data": {
                    "message": f"A binary frame ({size} bytes) was ignored: this endpoint reads JSON messages in text "
                               "frames; send the same JSON as a text frame.", "code": "BINARY_FRAME"}})})

        return text_only


def _check_text(value: Any, field: str) -> None:
    """A string that cannot be UTF-8 text (a lone surrogate, which JSON's \\u escapes allow) is refused up front."""
    if isinstance(value, str):
        try:
            value.encode("utf-8")
        except UnicodeEncodeError as exc:
            raise EnvRequestError(f"{field} holds a lone surrogate ({value[exc.start]!r} at character {exc.start}), "
                                  "which is not Unicode text; send it as valid UTF-8.", 422) from None


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

    app.add_middleware(BoundedRequests, limit=MAX_BODY_BYTES)

    @app.post("/reset", response_model=ResetResponse, tags=["Environment Control"])
    def reset(request: ResetRequest = Body(default_factory=ResetRequest)) -> dict[str, Any]:
        extra = request.model_extra or {}
        unknown = sorted(set(extra) - {"problem_id", "split", "max_turns"})
        if unknown:
            raise EnvRequestError(f"Unknown reset field {unknown[0]!r}; reset takes problem_id, seed, split, "
                                  "max_turns and episode_id.", 422)
        problem_id, split, max_turns = extra.get("problem_id"), extra.get("split", "train"), extra.get("max_turns")
        _check_text(problem_id, "problem_id")
        _check_text(split, "split")
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
        _check_text(code, "action.code")
        _check_text(extra.get("episode_id"), "episode_id")
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
