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

from kernelbench_rl.problems import SOLUTIONS_ROOT, get_problem
from kernelbench_rl.problems.model import imported_modules
from kernelbench_rl.store import Store

REPO = Path(__file__).resolve().parents[1]
KERNRL = REPO.parent / "shared" / "kernrl"

pytestmark = pytest.mark.skipif(not (KERNRL / "client.py").is_file(), reason=f"kernrl is not checked out at {KERNRL}")

RELU_AS_MODEL = RELU.replace("class ModelNew(", "class Model(")
SOFTMAX = (SOLUTIONS_ROOT / "level1" / "23_Softmax.py").read_text()


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


def kernrl_problem_files() -> dict[str, Path]:
    """kernrl's 89 problems by kernrl's own ids (`L1_23_Softmax`), read from its folder, not through our loader."""
    root = KERNRL / "problems"
    files = {f"L{level_dir.name.removeprefix('level')}_{path.stem}": path
             for level_dir in root.glob("level*") for path in level_dir.glob("[0-9]*.py")}
    assert len(files) == 89, f"kernrl's snapshot has {len(files)} problems, not 89"
    return files


def test_kernrl_client_with_a_format_failure_and_kernrl_ids_refused(server):
    """This server serves KernelBench's problems: a kernrl id (any form) names kernrl's problem, which it does not
    have, so it is refused with the command that serves kernrl's, never answered with KernelBench's problem."""
    kernrl = load_kernrl()
    with kernrl.kernrl_env(base_url=server.url) as env:
        for kernrl_id in ["L1_19", "L1_19_ReLU", "L1_23_Softmax", *sorted(kernrl_problem_files())]:
            with pytest.raises(RuntimeError, match="kernrl id.*env serve --problems-root") as refused:
                env.reset(problem_id=kernrl_id)
            assert "(code: NOT_FOUND)" in str(refused.value)  # the HTTP path's 404, named over kernrl's WebSocket

        first = env.reset(problem_id="L1/19")  # the session goes on after the refusals
        assert first.observation.problem_id == "L1/19"
        nothing = env.step(kernrl.KernelAction(code=NO_KERNEL))
        obs = nothing.observation
        assert (obs.compilation_success, obs.correctness_pass, obs.max_diff, obs.speedup) == (False, None, None, None)
        assert obs.compilation_error and "ModelNew" in obs.compilation_error
        assert nothing.reward == pytest.approx(-0.5)  # kernrl's server: did not compile

        right = env.step(kernrl.KernelAction(code=RELU_AS_MODEL))
        assert right.observation.correctness_pass is True and not right.done
        assert env.state().problem_id == "L1/19"


@pytest.fixture(scope="module")
def kernrl_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernrl-root")
    handle = Server(root / "env.duckdb", root / "server.log",
                    ["--problems-root", str(KERNRL), "problems.holdout_fraction=0", "problems.audit=false",
                     "eval.correctness_trials=1", "eval.timeout_s=120", "rewards.preset=kernrl_server"])
    handle.start()
    yield handle
    handle.stop()


def test_kernrl_client_gets_kernrl_problem_for_every_id(kernrl_server):
    """Served with `--problems-root <kernrl>`, every one of kernrl's 89 ids resets to kernrl's own problem (its file,
    verbatim), in every level; a problem this machine cannot run is refused at reset with the module it lacks."""
    kernrl = load_kernrl()
    files = kernrl_problem_files()
    levels = set()
    with kernrl.kernrl_env(base_url=kernrl_server.url) as env:
        for kernrl_id, path in sorted(files.items()):
            source = path.read_text()
            missing = [m for m in imported_modules(source) if importlib.util.find_spec(m) is None]
            if missing:
                with pytest.raises(RuntimeError, match=f"cannot run {kernrl_id}: .*imports {missing[0]}"):
                    env.reset(problem_id=kernrl_id)
                continue
            obs = env.reset(problem_id=kernrl_id).observation
            assert (obs.problem_id, obs.turn) == (kernrl_id, 0)
            assert obs.reference_code == source, f"{kernrl_id}: the server answered with another problem"
            levels.add(int(kernrl_id.split("_")[0][1:]))
        assert levels == set(range(1, 11))  # levels 4-10 are not hidden by the default levels

        # The short forms name kernrl's problem too, and its verdict is judged and stored as kernrl's.
        short = env.reset(problem_id="L1_23")
        assert short.observation.problem_id == "L1_23_Softmax"
        assert short.observation.reference_code == files["L1_23_Softmax"].read_text()
        right = env.step(kernrl.KernelAction(code=SOFTMAX))
        assert right.observation.correctness_pass is True, right.observation.feedback
    rows = Store(kernrl_server.db).fetchall("SELECT DISTINCT problem_id, suite FROM rollouts", read_only=True)
    assert rows == [("L1/23", "kernrl")]
