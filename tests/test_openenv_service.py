"""The environment service in-process (the server tests drive it over HTTP): holdout marking,
seeded problem choice, and a long-lived server's memory staying bounded. Steps here are format
failures, which the real evaluator judges without starting a worker."""

from __future__ import annotations

import pytest

from kernelbench_rl.envs.kernel_env import EnvSpec
from kernelbench_rl.evaluation.result import EvalSettings
from kernelbench_rl.integrations.openenv_env import EnvRequestError, KernelAction, KernelEnvService
from kernelbench_rl.problems import get_problem
from kernelbench_rl.store import Store


@pytest.fixture()
def service(tmp_path, shared_evaluator):
    train = [get_problem(pid) for pid in ("L1/19", "L1/20", "L1/21")]
    with shared_evaluator(EvalSettings(device="cpu")) as evaluator:
        yield KernelEnvService(evaluator, train, [get_problem("L1/24")], spec=EnvSpec(turns=1),
                               store=Store(tmp_path / "kb.duckdb"), keep_done=2)


def test_seeded_reset_is_reproducible_and_holdout_only_when_asked(service):
    assert service.reset(seed=7).problem_id == service.reset(seed=7).problem_id
    assert {service.reset(seed=s).problem_id for s in range(20)} <= {"L1/19", "L1/20", "L1/21"}
    held = service.reset(split="holdout")
    assert (held.problem_id, held.holdout) == ("L1/24", True)
    with pytest.raises(EnvRequestError) as refused:
        service.reset(problem_id="L1/24")
    assert refused.value.status_code == 403


def test_finished_episodes_beyond_the_cap_are_forgotten_but_their_rows_stay(service):
    ids = []
    for _ in range(5):
        obs = service.reset(problem_id="L1/19")
        service.step(KernelAction(code="no kernel here"), obs.episode_id)
        ids.append(obs.episode_id)
    service.reset(problem_id="L1/20")  # the reset is when old episodes are dropped
    assert service.state(ids[-1]).done
    with pytest.raises(EnvRequestError) as gone:
        service.state(ids[0])
    assert gone.value.status_code == 404
    steps = service.store.fetchall("SELECT step FROM rollouts WHERE run_id = 'openenv' ORDER BY step")
    assert [s for (s,) in steps] == [0, 1, 2, 3, 4]
