"""The OpenEnv environment server as users run it: `kernelbench-rl env serve` in its own process on a
free local port, driven over HTTP by our client (and raw requests for the bad inputs).

Evaluations are real (Triton's CPU interpreter, bundled small problems, one correctness trial);
the kernels are the bundled solutions, so verdicts are known. The database is a real DuckDB file
shared with the server process, and the "same rows as train" check reopens it with the training
loop's own evaluator.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
import pytest

from kernelbench_rl.integrations.openenv_client import EnvServerError, KernelEnvClient
from kernelbench_rl.integrations.openenv_env import KernelAction, as_response
from kernelbench_rl.problems import get_problem
from kernelbench_rl.problems.loaders import SOLUTIONS_ROOT
from kernelbench_rl.store import Store

REPO = Path(__file__).resolve().parents[1]
OVERRIDES = ["problems.levels=[1]", "eval.correctness_trials=1", "eval.timeout_s=60"]
RELU = (SOLUTIONS_ROOT / "level1/19_ReLU.py").read_text()
LEAKY = (SOLUTIONS_ROOT / "level1/20_LeakyReLU.py").read_text()
SIGMOID = (SOLUTIONS_ROOT / "level1/21_Sigmoid.py").read_text()
NO_KERNEL = "I am not able to write this kernel."


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class Server:
    """`kernelbench-rl env serve` in a subprocess; start() waits for /health."""

    def __init__(self, db: Path, log: Path) -> None:
        self.db, self.log = db, log
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernelbench_rl.cli", "env", "serve", "--port", str(self.port), "--device", "cpu",
             "--db", str(self.db), "--max-turns", "3", *OVERRIDES],
            cwd=REPO, env=env, stdout=self.log.open("a"), stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, f"the server exited early:\n{self.log.read_text()[-3000:]}"
            try:
                if httpx.get(f"{self.url}/health", timeout=2).json() == {"status": "healthy"}:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.3)
        raise AssertionError(f"the server did not become healthy:\n{self.log.read_text()[-3000:]}")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("envserve")
    handle = Server(root / "env.duckdb", root / "server.log")
    handle.start()
    yield handle
    handle.stop()


def test_three_turn_episode_over_http(server):
    with KernelEnvClient(server.url) as env:
        first = env.reset(problem_id="L1/19")
        obs = first.observation
        assert (obs.problem_id, obs.turn, obs.max_turns, obs.holdout, first.done) == ("L1/19", 0, 3, False, False)
        assert get_problem("L1/19").source.strip().splitlines()[-1] in obs.prompt  # the problem text is the prompt
        assert "ModelNew" in obs.prompt and "relu_kernel" not in obs.prompt  # no solution leaks

        one = env.step(NO_KERNEL)
        assert (one.observation.error_category, one.observation.format_ok, one.done) == ("format", False, False)
        assert one.reward == 0.0
        assert "no usable code block" in one.observation.prompt and "Status: format" in one.observation.prompt

        two = env.step(KernelAction(code=SIGMOID))  # a real kernel, for the wrong problem
        assert two.observation.compiled and not two.observation.correct and not two.done
        assert two.observation.error_category == "mismatch"
        assert "Status: mismatch" in two.observation.feedback and "Your previous kernel" in two.observation.prompt

        three = env.step(RELU)
        assert three.observation.correct and three.done and three.reward == pytest.approx(1.0)
        state = env.state()
        assert (state.problem_id, state.turn, state.history_length, state.done) == ("L1/19", 3, 3, True)

        with pytest.raises(EnvServerError) as after_done:
            env.step(RELU)
        assert after_done.value.status_code == 409 and "done" in after_done.value.message


def test_bad_inputs_get_one_sentence_4xx_and_the_server_stays_up(server):
    http = httpx.Client(base_url=server.url, timeout=60)
    episode = http.post("/reset", json={"problem_id": "L1/19"}).json()["observation"]["episode_id"]
    cases = [
        (http.post("/step", json={"action": {}, "episode_id": episode}), 422, "code"),
        (http.post("/step", json={"action": {"code": 5}, "episode_id": episode}), 422, "code"),
        (http.post("/step", json={"action": {"code": RELU, "colour": 1}, "episode_id": episode}), 422, "colour"),
        (http.post("/step", json={"episode_id": episode}), 422, "action"),
        (http.post("/step", content=b"{not json", headers={"content-type": "application/json"}), 422, "Malformed"),
        (http.post("/step", json={"action": {"code": "x" * 1_000_001}, "episode_id": episode}), 413, "limit"),
        (http.post("/step", json={"action": {"code": RELU, "backend": "cuda"}, "episode_id": episode}), 400, "triton"),
        (http.post("/step", json={"action": {"code": RELU}, "episode_id": "nope"}), 404, "Unknown episode"),
        (http.post("/reset", json={"problem_id": "L9/999"}), 404, "Unknown problem"),
        (http.post("/reset", json={"problem_id": "L1/24"}), 403, "holdout"),
        (http.post("/reset", json={"split": "test"}), 400, "split"),
    ]
    for response, status, word in cases:
        detail = response.json()["detail"]
        assert response.status_code == status, (status, detail)
        assert isinstance(detail, str) and word in detail and detail.count(". ") == 0, detail
    held = http.post("/reset", json={"problem_id": "L1/24", "split": "holdout"}).json()["observation"]
    assert held["holdout"] is True and held["problem_id"] == "L1/24"
    assert http.get("/health").json() == {"status": "healthy"}


def test_two_clients_at_once_share_the_evaluator(server):
    results: dict[str, object] = {}

    def episode(problem_id: str, kernel: str) -> None:
        with KernelEnvClient(server.url) as env:
            env.reset(problem_id=problem_id, max_turns=1)
            results[problem_id] = (env.episode_id, env.step(kernel), env.state())

    threads = [threading.Thread(target=episode, args=args) for args in (("L1/20", LEAKY), ("L1/21", SIGMOID))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=300)
    assert set(results) == {"L1/20", "L1/21"}
    (id_a, step_a, state_a), (id_b, step_b, state_b) = results["L1/20"], results["L1/21"]
    assert id_a != id_b
    assert step_a.observation.correct and step_b.observation.correct and step_a.done and step_b.done
    assert (state_a.problem_id, state_b.problem_id) == ("L1/20", "L1/21")


def test_openenv_websocket_client_drives_an_episode(server):
    from kernelbench_rl.integrations.openenv_client import KernelEnvWSClient

    with KernelEnvWSClient(base_url=server.url) as env:
        first = env.reset(problem_id="L1/19", max_turns=2)
        assert first.observation.problem_id == "L1/19" and not first.done
        one = env.step(KernelAction(code=NO_KERNEL))
        assert one.observation.error_category == "format" and not one.done
        two = env.step(KernelAction(code=RELU))  # cached by the first test
        assert two.observation.correct and two.done
        assert env.state().history_length == 2


def test_trl_reward_function_through_the_server(server):
    from kernelbench_rl.integrations.trl import KernelRewardFunction

    reward = KernelRewardFunction(env_url=server.url, preset="correctness")
    completions = [[{"role": "assistant", "content": as_response(RELU)}], NO_KERNEL]
    assert reward(prompts=["p", "p"], completions=completions, problem_id=["L1/19", "L1/19"]) == [pytest.approx(1.0), 0.0]


def rows(db: Path) -> dict[str, set]:
    store = Store(db)
    return {
        "rollouts": set(store.fetchall("SELECT run_id, step, problem_id, turn, eval_key FROM rollouts", read_only=True)),
        "rewards": set(store.fetchall("SELECT run_id, step, problem_id, turn, reward FROM rewards", read_only=True)),
        "evaluations": set(store.fetchall("SELECT eval_key, correct, error_category FROM evaluations", read_only=True)),
    }


def test_restart_loses_no_rows_and_verdicts_match_the_training_evaluator(server):
    before = rows(server.db)
    assert len(before["rollouts"]) >= 5 and len(before["rollouts"]) == len(before["rewards"])
    last_episode = max(step for _, step, *_ in before["rollouts"])
    server.stop()
    server.start()
    with KernelEnvClient(server.url) as env:
        env.reset(problem_id="L1/19", max_turns=1)
        again = env.step(RELU)
    assert again.observation.correct and again.observation.cached  # the verdict cache survived the restart
    after = rows(server.db)
    assert before["rollouts"] <= after["rollouts"] and before["rewards"] <= after["rewards"]
    new = after["rollouts"] - before["rollouts"]
    assert [(step, pid) for _, step, pid, *_ in new] == [(last_episode + 1, "L1/19")]
    server.stop()

    # The training loop's evaluator (same config) on the same completions: every verdict is the server's, from cache.
    from kernelbench_rl.config import load_config
    from kernelbench_rl.store.db import eval_key_for
    from kernelbench_rl.training.loop import open_evaluator, problem_split

    cfg = load_config("default", [*OVERRIDES, "eval.device=cpu", f"db_path={server.db}"])
    store = Store(server.db)
    completions = [as_response(k) for k in (NO_KERNEL, SIGMOID, RELU)]
    with open_evaluator(cfg, store, problem_split(cfg)[0]) as evaluator:
        verdicts = evaluator.evaluate_responses(["L1/19"] * 3, completions)
    assert [v.error_category.value for v in verdicts] == ["format", "mismatch", "ok"]
    assert all(v.cached for v in verdicts[1:])
    keys = {key for _, _, pid, _, key in after["rollouts"] if pid == "L1/19" and key}
    for verdict in verdicts[1:]:
        assert eval_key_for("L1/19", verdict.candidate_sha256, verdict.settings_hash) in keys
    assert rows(server.db)["evaluations"] == after["evaluations"]  # nothing re-ran, nothing new
