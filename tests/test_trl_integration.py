"""TRL's GRPOTrainer on our environment: the example script trains the shipped tiny model one step
on the CPU in its own process, with Kevin-style two-turn episodes through our rollout_func, and
the episodes' turns land in DuckDB as the env server writes them."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from kernelbench_rl.store import Store

REPO = Path(__file__).resolve().parents[1]


def test_adapter_imports_without_trl():
    # The adapter itself never imports trl (it is an optional extra); only the example does.
    code = "import sys; import kernelbench_rl.integrations.trl as t; assert 'trl' not in sys.modules; print(t.__name__)"
    done = subprocess.run([sys.executable, "-c", code], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]


def test_grpo_example_trains_one_multi_turn_step_on_the_cpu(tmp_path):
    pytest.importorskip("trl")
    db, scratch = tmp_path / "trl.duckdb", tmp_path / "tmp"
    scratch.mkdir()
    done = subprocess.run([sys.executable, "examples/trl_grpo_tiny.py", "--multi-turn", "--db", str(db)],
                          cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO), "TMPDIR": str(scratch)},
                          capture_output=True, text=True, timeout=500)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "trained 1 step(s)" in done.stdout
    assert not list(scratch.glob("trl-grpo-tiny-*"))  # without --output-dir, its temporary folder is gone
    turns = Store(db).fetchall("SELECT step, turn, format_ok, error_category FROM rollouts ORDER BY step, turn")
    # two prompts (one step, two generations each), two turns each: the tiny model never writes a kernel
    assert [(s, t) for s, t, *_ in turns] == [(0, 0), (0, 1), (1, 0), (1, 1)]


def test_a_dead_env_url_is_one_sentence_and_a_non_zero_exit(tmp_path):
    from kernelbench_rl.integrations.openenv_client import EnvServerUnreachable
    from kernelbench_rl.integrations.trl import KernelRewardFunction

    with socket.socket() as sock:  # a port nothing listens on
        sock.bind(("127.0.0.1", 0))
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    done = subprocess.run([sys.executable, "examples/trl_grpo_tiny.py", "--env-url", url, "--output-dir",
                           str(tmp_path / "out")], cwd=REPO, env={**os.environ, "PYTHONPATH": str(REPO)},
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 2, done.stderr[-3000:]
    assert done.stderr.strip() == (f"error: Could not reach the env server at {url} (ConnectError); start one with "
                                   "`kernelbench-rl env serve` or fix the URL.")
    with pytest.raises(EnvServerUnreachable, match="Could not reach the env server"):
        KernelRewardFunction(env_url=url)  # before any training starts


class ScriptedEpisode:
    """An environment whose verdicts are fixed in advance (the env server's infra reply is tested over a socket
    in test_openenv_server.py): each step returns the next (reward, done); None and not done is infra."""

    def __init__(self, verdicts: list[tuple[float | None, bool]]) -> None:
        self.verdicts = list(verdicts)
        self.sent: list[str] = []

    def reset(self, problem_id: str, max_turns: int) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"write {problem_id}"}]

    def step(self, response: str):
        self.sent.append(response)
        reward, done = self.verdicts.pop(0)
        return reward, done, None if done else [{"role": "user", "content": "feedback"}]


@pytest.mark.parametrize("verdicts, expected, resent", [
    ([(None, False), (1.0, True)], 1.0, True),                    # infra, sent again: judged, counted
    ([(None, False), (None, False), (None, False)], None, True),  # never judged: no return at all, not a zero
    ([(0.0, False), (None, True)], None, False),                  # too large / server gone in turn 2: no return
])
def test_the_multi_turn_rollout_never_turns_infra_into_zero(verdicts, expected, resent):
    import torch

    from kernelbench_rl.integrations.trl import kernel_prompt_dataset, make_rollout_func
    from kernelbench_rl.policy.tiny import load_base_model
    from kernelbench_rl.problems import get_problem

    loaded = load_base_model("local:tiny", torch.device("cpu"), seed=0)
    # What the rollout reads of GRPOTrainer: its tokenizer, its model, the completion length.
    trainer = SimpleNamespace(processing_class=loaded.tokenizer, model=loaded.model,
                              accelerator=SimpleNamespace(unwrap_model=lambda model: model),
                              args=SimpleNamespace(max_completion_length=4))
    problem = get_problem("L1/19")
    episode = ScriptedEpisode(verdicts)
    rollout = make_rollout_func([problem], lambda: episode, max_turns=2)
    out = rollout([kernel_prompt_dataset([problem])[0]["prompt"]], trainer)
    assert out["env_reward"] == [expected if expected is None else pytest.approx(expected)]
    assert not episode.verdicts  # every verdict was asked for: no more, no fewer steps
    assert (len(set(episode.sent[:2])) == 1) == resent  # an unjudged turn goes again, unchanged
