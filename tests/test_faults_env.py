"""The environment server against bad input it must not tip over on (a real `env serve` process): text that is
not Unicode, a chunked body past the limit, binary WebSocket frames, and a SIGTERM that must leave no folder."""

from __future__ import annotations

import json
import select
import signal
import socket
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from kernelbench_rl.integrations.openenv_server import MAX_BODY_BYTES

try:
    from tests.test_openenv_server import RELU, Server
except ImportError:  # pragma: no cover - run from tests/
    from test_openenv_server import RELU, Server


def _start(handle: Server, tmp: Path) -> None:
    with pytest.MonkeyPatch.context() as patch:  # the server's temporary folders (its evaluator home) go here
        patch.setenv("TMPDIR", str(tmp))
        handle.start()


@pytest.fixture(scope="module")
def _server(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults-env")
    handle = Server(root / "env.duckdb", root / "server.log")
    handle.tmp = root / "tmp"
    handle.tmp.mkdir()
    _start(handle, handle.tmp)
    yield handle
    handle.stop()


@pytest.fixture
def served(_server):
    """One server for the file (each start is a CLI process and an evaluator pool); the SIGTERM test, last, ends it,
    and a test after it would get a new one."""
    if _server.proc is None or _server.proc.poll() is not None:
        _start(_server, _server.tmp)
    return _server


def test_a_lone_surrogate_in_the_code_is_a_4xx_and_keeps_the_turn(served):
    """JSON's \\u escapes allow a lone surrogate, which is no Unicode text: before, a 500 that used up the turn."""
    reset = httpx.post(f"{served.url}/reset", json={"problem_id": "L1/19"}, timeout=60).json()
    episode = reset["observation"]["episode_id"]
    body = '{"action": {"code": "import torch\\ud800"}, "episode_id": "%s"}' % episode
    answer = httpx.post(f"{served.url}/step", content=body, headers={"content-type": "application/json"}, timeout=60)
    assert answer.status_code == 422, answer.text
    assert "lone surrogate" in answer.json()["detail"] and "action.code" in answer.json()["detail"]
    state = httpx.get(f"{served.url}/state", params={"episode_id": episode}, timeout=60).json()
    assert state["step_count"] == 0  # the turn is still there


def test_a_chunked_body_past_the_limit_is_refused_while_it_streams(served):
    """No Content-Length: refused once past the limit, not read whole (300 MB raised the server's memory by 1 GB)."""
    with socket.create_connection(("127.0.0.1", served.port), timeout=60) as sock:
        sock.sendall(b"POST /step HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                     b"Transfer-Encoding: chunked\r\n\r\n")
        chunk = b"a" * 65536
        sent, answered = 0, False
        while sent < 10 * MAX_BODY_BYTES:
            try:
                sock.sendall(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            except (BrokenPipeError, ConnectionResetError):
                answered = True
                break
            sent += len(chunk)
            if select.select([sock], [], [], 0)[0]:
                answered = True
                break
        assert answered, "the server read ten times the limit without answering"
        reply = ""
        while True:  # headers and body may come in separate segments: read until the server closes
            try:
                part = sock.recv(65536)
            except (ConnectionResetError, TimeoutError):
                break
            if not part:
                break
            reply += part.decode("latin-1")
            head, _, body = reply.partition("\r\n\r\n")
            length = next((int(line.split(":", 1)[1]) for line in head.split("\r\n")
                           if line.lower().startswith("content-length:")), None)
            if length is not None and len(body.encode("latin-1")) >= length:
                break
    assert reply.startswith("HTTP/1.1 413"), reply[:200]
    assert f"passed {MAX_BODY_BYTES} bytes" in reply


def test_a_binary_websocket_frame_gets_a_clear_error_and_the_session_goes_on(served):
    with connect(f"ws://127.0.0.1:{served.port}/ws", open_timeout=60) as ws:
        ws.send(json.dumps({"type": "reset", "data": {"problem_id": "L1/19"}}).encode())  # binary frame
        error = json.loads(ws.recv(timeout=60))
        assert error["type"] == "error" and error["data"]["code"] == "BINARY_FRAME"
        assert "text frame" in error["data"]["message"]
        ws.send(json.dumps({"type": "reset", "data": {"problem_id": "L1/19"}}))  # the same, as text
        answer = json.loads(ws.recv(timeout=60))
        assert answer["type"] == "observation", answer


def test_a_sigtermed_server_removes_its_evaluator_home(served):
    handle, tmp = served, served.tmp
    try:
        episode = httpx.post(f"{handle.url}/reset", json={"problem_id": "L1/19"}, timeout=60).json()
        httpx.post(f"{handle.url}/step", json={"action": {"code": RELU},
                                               "episode_id": episode["observation"]["episode_id"]}, timeout=300)
        assert list(tmp.glob("kbrl-eval-home-*")), "the evaluator made no home to remove"
        handle.proc.send_signal(signal.SIGTERM)
        handle.proc.wait(timeout=300)
    finally:
        handle.stop()
    assert not list(tmp.glob("kbrl-eval-home-*"))
