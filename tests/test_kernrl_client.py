"""kernrl's own client (OpenEnv's `kernrl_env`, loaded at run time from ../shared/kernrl, never copied) against
`kernelbench-rl env serve` in its own process: every field of kernrl's observation and state, its ids, candidates
whose class is named Model, and kernrl's server reward (`--preset kernrl_server`).

Evaluations are real (Triton's CPU interpreter, bundled small problems): nothing is timed on the CPU, so speedup
is None, best_speedup 0 and solved False, as kernrl defines them where nothing was timed.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest
from test_openenv_server import NO_KERNEL, OVERRIDES, RELU, SIGMOID, Server

from kernelbench_rl.problems import get_problem

REPO = Path(__file__).resolve().parents[1]
KERNRL = REPO.parent / "shared" / "kernrl"

pytestmark = pytest.mark.skipif(not (KERNRL / "client.py").is_file(), reason=f"kernrl is not checked out at {KERNRL}")

RELU_AS_MODEL = RELU.replace("class ModelNew(", "class Model(")


def load_kernrl():
    """kernrl's package (client and models) as its users import it."""
    if "kernrl_under_test" in sys.modules:
        return sys.modules["kernrl_under_test"]
    spec = importlib.util.spec_from_file_location("kernrl_under_test", KERNRL / "__init__.py",
                                                  submodule_search_locations=[str(KERNRL)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["kernrl_under_test"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernrl")
    handle = Server(root / "env.duckdb", root / "server.log", [*OVERRIDES, "rewards.preset=kernrl_server"])
    handle.start()
    yield handle
    handle.stop()


def test_kernrl_client_two_turns_every_field(server):
    kernrl = load_kernrl()
    assert "class Model(" in RELU_AS_MODEL and "ModelNew" not in RELU_AS_MODEL
    reference = get_problem("L1/19").source
    with kernrl.kernrl_env(base_url=server.url) as env:
        first = env.reset(problem_id="L1/19")
        obs = first.observation
        assert isinstance(obs, kernrl.KernelObservation)
        assert (obs.problem_id, obs.turn, obs.max_turns, first.done) == ("L1/19", 0, 3, False)
        assert reference.strip().splitlines()[-1] in obs.problem_description
        assert obs.reference_code == reference
        assert obs.gpu_info.startswith("cpu:")
        assert (obs.feedback, obs.compilation_success, obs.compilation_error) == ("", False, None)
        assert (obs.correctness_pass, obs.max_diff, obs.speedup) == (None, None, None)

        wrong = env.step(kernrl.KernelAction(code=SIGMOID))  # a real kernel, for another problem
        obs = wrong.observation
        assert (obs.problem_id, obs.turn, obs.max_turns, wrong.done) == ("L1/19", 1, 3, False)
        assert obs.compilation_success and obs.compilation_error is None
        assert obs.correctness_pass is False and obs.max_diff > 1e-4
        assert obs.speedup is None
        assert "mismatch" in obs.feedback
        assert wrong.reward == pytest.approx(-0.25)  # kernrl's server: compiles, wrong
        assert obs.reference_code == reference and obs.problem_description and obs.gpu_info

        right = env.step(kernrl.KernelAction(code=RELU_AS_MODEL))  # kernrl's convention: the class is Model
        obs = right.observation
        assert (obs.turn, right.done) == (2, False)  # not solved (nothing timed), and a third turn is left
        assert obs.compilation_success and obs.compilation_error is None
        assert obs.correctness_pass is True and 0.0 <= obs.max_diff <= 1e-4
        assert obs.speedup is None  # nothing is timed on the CPU
        assert right.reward == pytest.approx(0.0)  # kernrl's server: right, no speedup measured

        state = env.state()
        assert isinstance(state, kernrl.KernelState)
        assert (state.problem_id, state.turn, state.step_count, state.max_turns) == ("L1/19", 2, 2, 3)
        assert (state.best_speedup, state.solved) == (0.0, False)
        assert state.episode_id

        last = env.step(kernrl.KernelAction(code=RELU_AS_MODEL))
        assert last.done and last.observation.turn == 3 and env.state().turn == 3


def test_kernrl_client_with_kernrl_ids_and_a_format_failure(server):
    kernrl = load_kernrl()
    with kernrl.kernrl_env(base_url=server.url) as env:
        first = env.reset(problem_id="L1_19")
        if first.observation.reference_code != get_problem("L1/19").source:
            pytest.skip("kernrl's id form L1_19 does not resolve to L1/19 on this server")
        assert first.observation.problem_id == "L1_19"  # as the client asked for it

        nothing = env.step(kernrl.KernelAction(code=NO_KERNEL))
        obs = nothing.observation
        assert (obs.compilation_success, obs.correctness_pass, obs.max_diff, obs.speedup) == (False, None, None, None)
        assert obs.compilation_error and "ModelNew" in obs.compilation_error
        assert nothing.reward == pytest.approx(-0.5)  # kernrl's server: did not compile

        right = env.step(kernrl.KernelAction(code=RELU_AS_MODEL))
        assert right.observation.correctness_pass is True and not right.done
        assert env.state().problem_id == "L1_19"

        full = env.reset(problem_id="L1_19_ReLU")  # kernrl's full form: level and file stem
        assert full.observation.problem_id == "L1_19_ReLU" and full.observation.turn == 0
        again = env.step(kernrl.KernelAction(code=RELU))  # ModelNew is still fine
        assert again.observation.correctness_pass is True
