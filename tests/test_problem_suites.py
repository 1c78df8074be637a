"""Which suite a problem belongs to, wherever it shows: ids (kernrl's form names kernrl's problems only), the levels a
source offers by default, the environment's refusals and feedback, and the `suite` column of every stored row.

Real components: the bundled problems, a real Evaluator (CPU), real DuckDB files, the CLI's entry point.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelbench_rl.config import load_config
from kernelbench_rl.envs.kernel_env import EnvSpec
from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation.result import EvalSettings
from kernelbench_rl.integrations.openenv_env import EnvRequestError, KernelAction, KernelEnvService, as_response
from kernelbench_rl.problems import Problem, get_problem, load_problems, resolve_problem
from kernelbench_rl.store import Store
from kernelbench_rl.store.schema import MIGRATIONS
from kernelbench_rl.compose import load_split

REPO = Path(__file__).resolve().parents[1]
KERNRL = Path(os.environ.get("KBRL_KERNRL_ROOT") or REPO.parent / "shared" / "kernrl")
needs_kernrl = pytest.mark.skipif(not (KERNRL / "problems" / "level1").is_dir(),
                                  reason=f"no kernrl snapshot at {KERNRL} (set KBRL_KERNRL_ROOT)")

# A bare module (no code fence) that defines ModelNew and does not parse: line 9 lacks its colon.
BROKEN = """import torch
import torch.nn as nn
import triton
import triton.language as tl


class ModelNew(nn.Module):

    def forward(self, x)
        return x
"""


# -- ids -----------------------------------------------------------------------------------------
def test_a_kernrl_id_never_names_kernelbenchs_problem_of_the_same_number():
    bundled = load_problems(levels=[1, 10])
    assert resolve_problem("L1/23", bundled).suite == "kernelbench"  # ours names any suite's problem
    for kernrl_id in ("L1_23_Softmax", "L1_23", "L1_23_Soft"):
        assert resolve_problem(kernrl_id, bundled) is None, kernrl_id
    assert resolve_problem("L10_5", bundled).display_id == "L10_5_ChaCha20"  # a kernrl problem (bundled restatement)
    with pytest.raises(UserError) as refused:
        get_problem("L1_23_Softmax")
    message = str(refused.value)
    assert message.startswith("L1_23_Softmax is a kernrl id, and kernrl's own problems are not loaded here")
    assert "L1/23 here is KernelBench's 23_Softmax, another problem" in message
    assert "KernelBench's problems, levels 1-3" in message and "--problems-root" in message


def test_ids_print_in_their_suites_form():
    done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "problems", "list", "--ids"], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env={**os.environ, "KBRL_PROBLEMS_ROOT": "",
                                                                            "KERNELBENCH_ROOT": ""})
    assert done.returncode == 0, done.stderr
    ids = done.stdout.split()
    assert "L1/19" in ids and "L10_5_ChaCha20" in ids and "L10/5" not in ids and "L1_19_ReLU" not in ids


@needs_kernrl
def test_default_levels_are_the_sources_own():
    """`problems.levels` unset: levels 1-3 of the bundled set, every level of kernrl's; a level list still restricts."""
    assert {p.level for p in load_split(load_config("default").problems).all} == {1, 2, 3}
    kernrl = load_config("default", [f"problems.root={KERNRL}"])
    assert {p.level for p in load_split(kernrl.problems).all} == set(range(1, 11))
    restricted = load_config("default", [f"problems.root={KERNRL}", "problems.levels=[1,2,3]"])
    assert {p.level for p in load_split(restricted.problems).all} == {1, 2, 3}
    # A run configured with the old default [1, 2, 3] keeps its id on the bundled set.
    assert load_config("default").resolved_run_id() == load_config("default", ["problems.levels=[1,2,3]"]).resolved_run_id()
    assert kernrl.resolved_run_id() != restricted.resolved_run_id()


def test_eval_model_takes_problems_root(tmp_path):
    done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "eval-model", "--policy", "openai:m",
                           "--base-url", "http://127.0.0.1:9/v1", "--problems-root", str(tmp_path / "nowhere"),
                           "--db", str(tmp_path / "e.duckdb")], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2, done.stdout + done.stderr
    assert "nowhere does not exist" in done.stderr and "Traceback" not in done.stderr


# -- the environment -----------------------------------------------------------------------------
MISSING = Problem(level=4, number=99, name="99_NeedsMissing", origin="inline", suite="kernrl",
                  source=get_problem("L1/19").source.replace("import torch\n", "import torch\nimport kbrl_not_installed\n", 1))


@pytest.fixture
def service(tmp_path, shared_evaluator):
    store = Store(tmp_path / "env.duckdb")
    store.init()
    problems = [get_problem("L1/19"), get_problem("L10/5"), MISSING]
    with shared_evaluator(EvalSettings(device="cpu"), store=store, problems={p.id: p for p in problems}) as evaluator:
        yield KernelEnvService(evaluator, problems, [], spec=EnvSpec(turns=2), store=store)


def test_a_problem_this_machine_cannot_run_is_refused_at_reset(service):
    with pytest.raises(EnvRequestError) as refused:
        service.reset(problem_id="L4/99")
    assert refused.value.status_code == 422
    assert "cannot run L4_99_NeedsMissing: L4_99_NeedsMissing imports kbrl_not_installed" in str(refused.value)
    drawn = {service.reset(seed=seed).problem_id for seed in range(12)}  # a random draw never lands on it
    assert drawn == {"L1/19", "L10_5_ChaCha20"}


def test_a_bare_module_with_a_syntax_error_is_told_its_line(service):
    assert "```python" in as_response(BROKEN)
    service.reset(problem_id="L1/19")
    obs = service.step(KernelAction(code=BROKEN))
    assert not obs.format_ok and not obs.compilation_success
    assert "line 9" in obs.error_line and "expected ':'" in obs.error_line, obs.error_line
    assert "line 9" in obs.feedback and "no ```python block" not in obs.feedback
    assert "line 9" in obs.compilation_error
    # Prose stays prose: a response without code is still told that no code block was found.
    assert as_response("I cannot write a ModelNew for this.") == "I cannot write a ModelNew for this."


# -- the store -----------------------------------------------------------------------------------
def test_every_row_the_environment_writes_names_its_suite(service):
    for problem_id in ("L1/19", "L10_5"):
        episode = service.reset(problem_id=problem_id).episode_id
        service.step(KernelAction(code="I am not able to write this kernel."), episode)  # a format failure: no evaluation
        service.step(KernelAction(code=BROKEN), episode)  # judged (compile error): an evaluations row
    store = service.store
    query = "SELECT DISTINCT problem_id, suite FROM {} ORDER BY problem_id"
    expected = [("L1/19", "kernelbench"), ("L10/5", "kernrl")]
    for table in ("rollouts", "rewards", "evaluations"):
        assert store.fetchall(query.format(table), read_only=True) == expected, table


def test_an_old_database_gains_the_suite_column_and_what_its_rows_tell(tmp_path):
    path = tmp_path / "old.duckdb"
    old = Store(path, migrations=[m for m in MIGRATIONS if m[0] < 14])
    old.init()
    old.upsert("problems", [
        {"problem_id": "L1/23", "source_sha256": "k", "level": 1, "number": 23, "name": "23_Softmax", "origin": "kernrl_root"},
        {"problem_id": "L1/23", "source_sha256": "b", "level": 1, "number": 23, "name": "23_Softmax", "origin": "bundled"},
    ])
    old.upsert("evaluations", [
        {"eval_key": "e1", "problem_id": "L1/23", "result_json": json.dumps({"versions": {"suite": "kernrl"}})},
        {"eval_key": "e2", "problem_id": "L1/23", "result_json": "{not json"},
    ])
    old.upsert("rollouts", [
        {"run_id": "r", "step": 0, "problem_id": "L1/23", "sample_index": 0, "turn": 0, "level": 1, "eval_key": "e1"},
        {"run_id": "r", "step": 0, "problem_id": "L1/23", "sample_index": 1, "turn": 0, "level": 1},
        {"run_id": "r", "step": 0, "problem_id": "L6/2", "sample_index": 0, "turn": 0, "level": 6},
    ])
    old.upsert("rewards", [{"run_id": "r", "step": 0, "problem_id": "L1/23", "sample_index": 0, "turn": 0, "reward": 1.0}])
    old.upsert("baselines", [{"problem_id": "L1/23", "source_sha256": "k", "precision": "fp32", "hardware": "h",
                              "size": "small", "eager_ms": 1.0}])
    assert "suite" not in {c[0] for c in old.fetchall("DESCRIBE rollouts")}

    store = Store(path)
    assert store.migrate() >= 14
    rows = lambda table: store.fetchall(f"SELECT problem_id, suite FROM {table} ORDER BY ALL")  # noqa: E731
    assert rows("problems") == [("L1/23", "kernelbench"), ("L1/23", "kernrl")]
    assert rows("evaluations") == [("L1/23", "kernrl"), ("L1/23", None)]  # unreadable: left unknown, not guessed
    assert rows("rollouts") == [("L1/23", "kernrl"), ("L1/23", None), ("L6/2", "kernrl")]
    assert rows("rewards") == [("L1/23", "kernrl")]
    assert rows("baselines") == [("L1/23", "kernrl")]
    assert store.fetchall("SELECT reward FROM rewards") == [(1.0,)]  # nothing else changed
    assert Store(path).migrate() == store.migrate()  # applied once
