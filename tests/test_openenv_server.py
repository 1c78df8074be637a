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
from proc_tree import descendants

from kernelbench_rl.integrations.openenv_client import EnvServerError, KernelEnvClient, KernelEnvWSClient
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

    def __init__(self, db: Path, log: Path, overrides: list[str] = OVERRIDES) -> None:
        self.db, self.log, self.overrides = db, log, overrides
        self.port = free_port()
        self.proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        env = {**os.environ, "PYTHONPATH": str(REPO)}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "kernelbench_rl.cli", "env", "serve", "--port", str(self.port), "--device", "cpu",
             "--db", str(self.db), "--max-turns", "3", *self.overrides],
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
        (http.post("/reset", json={"problem_id": "L9/999"}), 404, "No problem L9/999 is among those loaded (KernelBench's"),
        # kernrl's id names kernrl's problem, not KernelBench's L1/19: refused, with the command that serves kernrl's.
        (http.post("/reset", json={"problem_id": "L1_19_ReLU"}), 404, "env serve --problems-root"),
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
    from kernelbench_rl.compose import build_run_parts

    parts = build_run_parts(load_config("default", [*OVERRIDES, "eval.device=cpu", f"db_path={server.db}"]))
    store = Store(server.db)
    completions = [as_response(k) for k in (NO_KERNEL, SIGMOID, RELU)]
    with parts.evaluator.open(store, parts.split.all) as evaluator:
        verdicts = evaluator.evaluate_responses(["L1/19"] * 3, completions)
    assert [v.error_category.value for v in verdicts] == ["format", "mismatch", "ok"]
    assert all(v.cached for v in verdicts[1:])
    keys = {key for _, _, pid, _, key in after["rollouts"] if pid == "L1/19" and key}
    for verdict in verdicts[1:]:
        assert eval_key_for("L1/19", verdict.candidate_sha256, verdict.settings_hash) in keys
    assert rows(server.db)["evaluations"] == after["evaluations"]  # nothing re-ran, nothing new


# -- episodes a client gave up, and our own failures ---------------------------------------------------------
IDLE_S = 6  # env.idle_timeout_s of the server below: long beside the gaps between one test's requests
SLEEPER = "import time\ntime.sleep(600)\n" + RELU  # parks its sandbox child at import, where a test can find it


@pytest.fixture(scope="module")
def short_idle_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("envserve_idle")
    handle = Server(root / "env.duckdb", root / "server.log",
                    [*OVERRIDES, f"env.idle_timeout_s={IDLE_S}", "eval.timeout_s=600"])
    handle.start()
    yield handle
    handle.stop()


def test_a_dropped_websocket_closes_its_episode(short_idle_server):
    """A WebSocket client that vanishes mid-episode leaves nothing open: the README's walk-through (reset, then
    step without an episode id) works right after, and the dropped episode says why it ended."""
    http = httpx.Client(base_url=short_idle_server.url, timeout=600)
    client = subprocess.Popen(  # a WebSocket client process that starts an episode, then dies
        [sys.executable, "-c", "import sys, time\n"
         "from kernelbench_rl.integrations.openenv_client import KernelEnvWSClient\n"
         "env = KernelEnvWSClient(base_url=sys.argv[1]).connect()\n"
         "print(env.reset(problem_id='L1/19', max_turns=2).observation.episode_id, flush=True)\n"
         "time.sleep(600)\n", short_idle_server.url],
        cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, text=True)
    episode = client.stdout.readline().strip()
    assert http.get("/state", params={"episode_id": episode}).json()["done"] is False
    client.kill()  # no close message, no close frame: the connection just drops
    client.wait()
    deadline = time.monotonic() + IDLE_S / 2  # closed by the disconnect, well before it could expire
    while not http.get("/state", params={"episode_id": episode}).json()["done"] and time.monotonic() < deadline:
        time.sleep(0.1)
    state = http.get("/state", params={"episode_id": episode}).json()
    assert (state["done"], state["end_reason"]) == (True, "disconnected")
    refused = http.post("/step", json={"action": {"code": RELU}, "episode_id": episode})
    assert refused.status_code == 409 and "WebSocket session ended" in refused.json()["detail"]

    http.post("/reset", json={"problem_id": "L1/19"}).raise_for_status()
    walked = http.post("/step", json={"action": {"code": RELU}})
    assert walked.status_code == 200, walked.json()
    assert walked.json()["observation"]["correct"]


def test_an_idle_episode_expires_and_says_so(short_idle_server):
    http = httpx.Client(base_url=short_idle_server.url, timeout=600)
    episode = http.post("/reset", json={"problem_id": "L1/20"}).json()["observation"]["episode_id"]
    deadline = time.monotonic() + 60
    while not http.get("/state", params={"episode_id": episode}).json()["done"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert http.get("/state", params={"episode_id": episode}).json()["end_reason"] == "expired"
    late = http.post("/step", json={"action": {"code": LEAKY}, "episode_id": episode})
    assert late.status_code == 409
    assert f"closed after {IDLE_S} s without a request" in late.json()["detail"] and "/reset" in late.json()["detail"]


def _parked_candidate(server_pid: int) -> tuple[int, int] | None:
    """(pid, its worker's pid) of a sandboxed child parked in SLEEPER's sleep, or None.

    A candidate's child is a worker's grandchild (server -> worker -> forkserver -> child); it is told apart from
    children that sleep briefly while they start by its kernel wait channel and its CPU time, both unchanged for 3 s."""
    def sample() -> dict[int, tuple[int, list[int]]]:
        seen = {}
        for pid in descendants(server_pid):
            try:
                with open(f"/proc/{pid}/wchan") as handle:
                    if "nanosleep" not in handle.read():
                        continue
                with open(f"/proc/{pid}/stat") as handle:
                    fields = handle.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            chain = [pid, int(fields[1])]
            while chain[-1] not in (server_pid, 1):
                try:
                    with open(f"/proc/{chain[-1]}/stat") as handle:
                        chain.append(int(handle.read().rsplit(")", 1)[1].split()[1]))
                except OSError:
                    break
            if chain[-1] == server_pid and len(chain) >= 4:
                seen[pid] = (int(fields[11]) + int(fields[12]), chain)  # utime + stime
        return seen

    first = sample()
    time.sleep(3)
    second = sample()
    for pid, (cpu, chain) in second.items():
        if pid in first and first[pid][0] == cpu:
            return pid, chain[-2]
    return None


def _kill_the_worker_of_a_parked_candidate(server_pid: int, not_this_child: int = 0) -> int:
    """SIGKILL the evaluation worker of SLEEPER's parked child (its result is lost with it); the child's pid."""
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline:
        found = _parked_candidate(server_pid)
        if found is not None and found[0] != not_this_child:
            os.kill(found[1], signal.SIGKILL)
            return found[0]
    raise AssertionError("no sandboxed child parked in the sleep")


def test_an_infra_failure_gives_the_turn_back(short_idle_server):
    """A lost worker is our fault: the step says so, the turn is not consumed, and the same turn is judged on retry."""
    http = httpx.Client(base_url=short_idle_server.url, timeout=900)
    episode = http.post("/reset", json={"problem_id": "L1/19", "max_turns": 2}).json()["observation"]["episode_id"]
    answer: dict = {}
    stepping = threading.Thread(target=lambda: answer.update(
        http.post("/step", json={"action": {"code": SLEEPER}, "episode_id": episode}).json()))
    stepping.start()
    # The pool retries a request once on a new worker when its worker dies: both attempts are lost.
    first = _kill_the_worker_of_a_parked_candidate(short_idle_server.proc.pid)
    _kill_the_worker_of_a_parked_candidate(short_idle_server.proc.pid, not_this_child=first)
    stepping.join(timeout=600)
    obs = answer["observation"]
    assert (obs["error_category"], answer["reward"], answer["done"], obs["turn"]) == ("infra", None, False, 0), answer
    assert "not because of your kernel" in obs["feedback"] and "send the same code again" in obs["feedback"]
    assert "turn 1 of 2 is still yours" in obs["feedback"]
    state = http.get("/state", params={"episode_id": episode}).json()
    assert (state["turn"], state["done"]) == (0, False)

    again = http.post("/step", json={"action": {"code": RELU}, "episode_id": episode}).json()
    assert again["observation"]["correct"] and again["observation"]["turn"] == 1 and not again["done"]
    # One row for the turn, the retry's verdict in place of the lost one.
    turns = Store(short_idle_server.db).fetchall(
        "SELECT turn, error_category FROM rollouts WHERE step = (SELECT max(step) FROM rollouts)", read_only=True)
    assert turns == [(0, "ok")]
