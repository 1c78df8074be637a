"""The HTTP app of the KernelBench OpenEnv environment (see openenv_env.py for the contract).

Our routes come first: POST /reset, POST /step, GET /state, GET /health and the /ws session
endpoint, with OpenEnv's request, response and message shapes and episodes kept by id. OpenEnv's
own server then adds /schema and /metadata (its /reset, /step and /ws are shadowed by ours). Both
transports check a request with the same functions (`reset_arguments`, `parse_action`) and refuse it
alike: every caller mistake is a 4xx with one sentence, in `detail` over HTTP and in an error frame
(`data.message`, `data.status`, `data.code`) over the WebSocket, and a refused step never uses up a
turn. Evaluation runs in worker threads, so episodes of different clients are evaluated at once by
the one shared evaluator pool.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import threading
from typing import Any

import kernelbench_rl.integrations.openenv_env  # noqa: F401 - first: it imports openenv quietly
from fastapi import Body, FastAPI, Request, WebSocket, WebSocketDisconnect
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from openenv.core.env_server.http_server import HTTPEnvServer
from openenv.core.env_server.serialization import serialize_observation
from openenv.core.env_server.types import HealthResponse, ResetRequest, ResetResponse, StepRequest, StepResponse
from pydantic import ValidationError
from starlette.concurrency import run_in_threadpool

from kernelbench_rl.integrations.openenv_env import (
    MAX_CODE_BYTES, EnvRequestError, KernelAction, KernelEnvironment, KernelEnvService, KernelObservation, KernelState,
    check_episode_id, parse_action, reset_arguments, validation_sentence,
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


# WebSocket sessions served at once (OpenEnv's own endpoint had the same bound); each holds at most one open episode.
MAX_WS_SESSIONS = 64
# An error frame's `code` for each status a refusal can have (the HTTP path's status is in `status`).
WS_ERROR_CODES = {400: "BAD_REQUEST", 403: "FORBIDDEN", 404: "NOT_FOUND", 409: "CONFLICT", 413: "TOO_LARGE",
                  422: "INVALID_REQUEST", 500: "EXECUTION_ERROR", 503: "UNAVAILABLE"}


def _sentence(exc: ValidationError | RequestValidationError, prefix: str = "") -> str:
    return validation_sentence(exc, prefix)  # type: ignore[arg-type]


def _ws_error(message: str, status: int) -> str:
    return json.dumps({"type": "error", "data": {"message": message, "code": WS_ERROR_CODES.get(status, "ERROR"),
                                                 "status": status}})


def ws_answer(session: KernelEnvironment, raw: str) -> str | None:
    """The answer frame to one WebSocket message (None: the client closed the session). The checks are the HTTP
    routes' own, so a request is refused with the same status and sentence either way."""
    try:
        message = json.loads(raw)
    except json.JSONDecodeError as exc:
        return _ws_error(f"The message is not JSON ({exc.msg} at character {exc.pos}); send one JSON object per "
                         "text frame.", 400)
    if not isinstance(message, dict):
        return _ws_error('A message is a JSON object such as {"type": "reset", "data": {}}.', 422)
    kind, data = message.get("type"), message.get("data", {})
    try:
        if kind == "close":
            return None
        if kind == "state":
            return json.dumps({"type": "state", "data": session.state.model_dump()})
        if kind not in ("reset", "step"):
            raise EnvRequestError(f"Unknown message type {str(kind)[:40]!r}; send reset, step, state or close.", 400)
        if not isinstance(data, dict):
            raise EnvRequestError(f"The {kind} message's data must be a JSON object.", 422)
        if kind == "reset":
            arguments = reset_arguments(data)
            arguments.pop("episode_id")  # a session names its own episodes
            observation = session.reset(**arguments)
        else:
            observation = session.step(parse_action(data))
        return json.dumps({"type": "observation", "data": serialize_observation(observation)})
    except EnvRequestError as exc:
        return _ws_error(str(exc), exc.status_code)


def _observation_payload(observation: KernelObservation) -> dict[str, Any]:
    data = observation.model_dump(exclude={"reward", "done"})
    return {"observation": data, "reward": observation.reward, "done": observation.done}


def create_app(service: KernelEnvService) -> FastAPI:
    """The app serving `service`; a store it could not write is refused here (UnwritableError, one sentence), not
    answered with a failed step per request."""
    if service.store is not None:
        from kernelbench_rl.writable import check_writable_file

        check_writable_file(service.store.path, "the database")
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
        declared = {"seed": request.seed, "episode_id": request.episode_id}
        arguments = reset_arguments({**{k: v for k, v in declared.items() if v is not None}, **(request.model_extra or {})})
        return _observation_payload(service.reset(**arguments))

    @app.post("/step", response_model=StepResponse, tags=["Environment Control"])
    def step(request: StepRequest) -> dict[str, Any]:
        extra = request.model_extra or {}
        unknown = sorted(set(extra) - {"episode_id"}, key=str)
        if unknown:
            raise EnvRequestError(f"Unknown step field {unknown[0]!r}; step takes action and episode_id.", 422)
        action = parse_action(request.action)
        return _observation_payload(service.step(action, check_episode_id(extra.get("episode_id"))))

    @app.get("/state", response_model=KernelState, tags=["State Management"])
    def state(episode_id: str | None = None) -> KernelState:
        return service.state(check_episode_id(episode_id))

    @app.get("/health", response_model=HealthResponse, tags=["Health"])
    def health() -> HealthResponse:
        return HealthResponse(status="healthy")

    sessions = threading.BoundedSemaphore(MAX_WS_SESSIONS)

    @app.websocket("/ws")
    async def ws(websocket: WebSocket) -> None:
        """OpenEnv's session protocol (reset, step, state, close; one episode at a time per session), each message
        checked as the HTTP routes check it. The session's episode ends when the session does."""
        await websocket.accept()
        if not sessions.acquire(blocking=False):
            await websocket.send_text(json.dumps({"type": "error", "data": {
                "message": f"The server holds {MAX_WS_SESSIONS} WebSocket sessions, its limit; connect again later.",
                "code": "CAPACITY_REACHED", "status": 503}}))
            await websocket.close()
            return
        session = KernelEnvironment(service)
        closing = False  # the client asked to close (else it went away, and there is nothing to close)
        try:
            while True:
                raw = await websocket.receive_text()
                try:
                    answer = await run_in_threadpool(ws_answer, session, raw)
                except Exception as exc:  # noqa: BLE001 - ours, not the client's: one sentence, the session goes on
                    answer = _ws_error(f"The server failed on its side ({type(exc).__name__}); send it again.", 500)
                if answer is None:
                    closing = True
                    break
                await websocket.send_text(answer)
        except WebSocketDisconnect:
            pass
        finally:
            await asyncio.to_thread(session.close)
            sessions.release()
            if closing:
                with contextlib.suppress(RuntimeError, WebSocketDisconnect):
                    await websocket.close()

    # OpenEnv's server for /schema and /metadata (its /ws is shadowed by ours above).
    HTTPEnvServer(lambda: KernelEnvironment(service), KernelAction, KernelObservation,
                  max_concurrent_envs=MAX_WS_SESSIONS).register_routes(app)
    return app
