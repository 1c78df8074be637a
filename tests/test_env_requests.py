"""The environment server's two transports refuse alike: a real `env serve` process driven over HTTP and over its
WebSocket (kernrl's transport) with the same bad requests gets the same status and sentence either way, and a refused
step never uses up a turn. Open episodes are capped per server (the one idle longest is closed for a newer one), and
a problem id longer than any is a 4xx, never a 500."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from pathlib import Path

import httpx
import pytest
from websockets.sync.client import connect

from kernelbench_rl.envs.kernel_env import EnvSpec
from kernelbench_rl.evaluation.result import EvalSettings
from kernelbench_rl.integrations.openenv_env import EnvRequestError, KernelAction, KernelEnvService
from kernelbench_rl.problems import get_problem
from kernelbench_rl.store import Store

try:
    from tests.test_openenv_server import RELU, Server
except ImportError:  # pragma: no cover - run from tests/
    from test_openenv_server import RELU, Server

SURROGATE_STEP = '{"type": "step", "data": {"code": "import torch\\ud800"}}'
LONG_ID = "L1/" + "9" * 5000


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    root = tmp_path_factory.mktemp("env-requests")
    handle = Server(root / "env.duckdb", root / "server.log")
    handle.start()
    yield handle
    handle.stop()


def _ws(served: Server):
    return connect(f"ws://127.0.0.1:{served.port}/ws", open_timeout=60, max_size=None)


def _ask(ws, message: str | dict) -> dict:
    ws.send(message if isinstance(message, str) else json.dumps(message))
    return json.loads(ws.recv(timeout=300))


def test_a_lone_surrogate_over_the_websocket_is_the_http_422_and_keeps_the_turn(served):
    reset = httpx.post(f"{served.url}/reset", json={"problem_id": "L1/19"}, timeout=60).json()
    body = '{"action": {"code": "import torch\\ud800"}, "episode_id": "%s"}' % reset["observation"]["episode_id"]
    http = httpx.post(f"{served.url}/step", content=body, headers={"content-type": "application/json"}, timeout=60)
    assert http.status_code == 422

    with _ws(served) as ws:
        first = _ask(ws, {"type": "reset", "data": {"problem_id": "L1/19"}})
        assert first["type"] == "observation", first
        for _ in range(4):  # the episode has three turns: four refused steps must leave all three
            error = _ask(ws, SURROGATE_STEP)
            assert error["type"] == "error", error
            assert error["data"]["status"] == 422 and error["data"]["message"] == http.json()["detail"]
        state = _ask(ws, {"type": "state"})
        assert (state["data"]["step_count"], state["data"]["done"]) == (0, False)
        judged = _ask(ws, {"type": "step", "data": {"code": RELU}})
        assert judged["type"] == "observation" and judged["data"]["observation"]["correct"] is True
        assert judged["data"]["observation"]["turn"] == 1


@pytest.mark.parametrize("reset, step", [
    ({"problem_id": "L1/19", "colour": "red"}, None),  # an unknown field
    ({"problem_id": LONG_ID}, None),  # past Python's int-string limit: a 500 before
    ({"problem_id": "L9/999"}, None),
    ({"problem_id": "L1/19", "max_turns": "two"}, None),
    ({"problem_id": "L1/19"}, {"code": "x = 1\n" * 200_000}),  # past the code limit
    ({"problem_id": "L1/19"}, {"code": RELU, "backend": "fortran"}),
    ({"problem_id": "L1/19"}, {"kernel": RELU}),
])
def test_both_transports_refuse_a_bad_request_with_the_same_status_and_sentence(served, reset, step):
    http_reset = httpx.post(f"{served.url}/reset", json=reset, timeout=60)
    with _ws(served) as ws:
        ws_reset = _ask(ws, {"type": "reset", "data": reset})
        if step is None:
            assert 400 <= http_reset.status_code < 500, http_reset.text
            assert ws_reset["type"] == "error"
            assert (ws_reset["data"]["status"], ws_reset["data"]["message"]) == (http_reset.status_code,
                                                                               http_reset.json()["detail"])
            assert len(ws_reset["data"]["message"]) < 400
            return
        episode = http_reset.json()["observation"]["episode_id"]
        http_step = httpx.post(f"{served.url}/step", json={"action": step, "episode_id": episode}, timeout=60)
        ws_step = _ask(ws, {"type": "step", "data": step})
        assert 400 <= http_step.status_code < 500, http_step.text
        assert (ws_step["data"]["status"], ws_step["data"]["message"]) == (http_step.status_code,
                                                                         http_step.json()["detail"])
        state = _ask(ws, {"type": "state"})
        assert state["data"]["step_count"] == 0
    http_state = httpx.get(f"{served.url}/state", params={"episode_id": episode}, timeout=60).json()
    assert http_state["step_count"] == 0


def test_problem_ids_past_the_bound_are_one_sentence_wherever_they_are_parsed():
    from kernelbench_rl.errors import ExitCode, UserError
    from kernelbench_rl.problems import get_problem as named
    from kernelbench_rl.problems.model import MAX_PROBLEM_ID_CHARS, parse_problem_id, resolve_problem

    for long_id in (LONG_ID, "L1_" + "9" * 5000, "L" + "7" * 5000):
        with pytest.raises(UserError) as err:
            named(long_id)
        assert err.value.exit_code == ExitCode.BAD_INPUT
        assert f"at most {MAX_PROBLEM_ID_CHARS}" in str(err.value) and len(str(err.value)) < 200
        with pytest.raises(ValueError):
            parse_problem_id(long_id)
        with pytest.raises(UserError):
            resolve_problem(long_id, [named("L1/19")])

    relu = Path(__file__).resolve().parents[1] / "KernelBench" / "solutions" / "level1" / "19_ReLU.py"
    for command in (["problems", "show", LONG_ID], ["eval", "--problem", LONG_ID, "--kernel", str(relu)]):
        done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", *command], capture_output=True, text=True,
                              timeout=300, cwd=relu.parents[3])
        (line,) = done.stderr.strip().splitlines()
        assert done.returncode == ExitCode.BAD_INPUT and f"at most {MAX_PROBLEM_ID_CHARS}" in line, done.stderr[-2000:]


@pytest.fixture()
def service(tmp_path, shared_evaluator):
    train = [get_problem(pid) for pid in ("L1/19", "L1/20", "L1/21")]
    with shared_evaluator(EvalSettings(device="cpu")) as evaluator:
        yield KernelEnvService(evaluator, train, [], spec=EnvSpec(turns=2), store=Store(tmp_path / "kb.duckdb"),
                               max_open_episodes=16, keep_done=4_000)


def test_open_episodes_are_capped_and_the_one_idle_longest_makes_room(service):
    oldest = service.reset(problem_id="L1/19").episode_id
    kept = service.reset(problem_id="L1/20").episode_id
    service.step(KernelAction(code="no kernel here"), kept)  # a request: now the newest activity of the two
    opened: list[str] = []
    failures: list[BaseException] = []

    def many() -> None:
        try:
            for _ in range(500):
                opened.append(service.reset().episode_id)
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    threads = [threading.Thread(target=many) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not failures and len(opened) == 2_000
    assert service.open_episodes == 16
    assert service.state(oldest).end_reason == "evicted"
    with pytest.raises(EnvRequestError) as closed:
        service.step(KernelAction(code="no kernel here"), oldest)
    assert closed.value.status_code == 409 and "make room" in str(closed.value)
    assert "--max-open-episodes" in str(closed.value)
    assert service.state(kept).end_reason == "evicted"  # its step was long before the last resets
    assert all(not service.state(e).done for e in opened[-4:])  # the newest are the ones still open


def test_a_step_whose_row_cannot_be_written_gives_the_turn_back(service, monkeypatch):
    episode = service.reset(problem_id="L1/19").episode_id

    def unwritable(*_args, **_kwargs):
        raise OSError(30, "Read-only file system")

    monkeypatch.setattr(service.store, "write_batch", unwritable)
    with pytest.raises(EnvRequestError) as refused:
        service.step(KernelAction(code="no kernel here"), episode)
    assert refused.value.status_code == 503 and "the turn was not used" in str(refused.value)
    assert service.state(episode).step_count == 0 and not service.state(episode).done
    monkeypatch.undo()
    service.step(KernelAction(code="no kernel here"), episode)
    assert service.state(episode).step_count == 1
    assert service.store.fetchall("SELECT count(*) FROM rollouts")[0][0] == 1
