"""Problem sources through the config and the environment server: `problems.root` (and its older name) reaches
training, evaluation and the evaluator; ids in any accepted form; and a problem's own needs (eval mode, its
input dtypes, inputs drawn from Python's `random`) honoured for the reference and the candidate alike."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kernelbench_rl.config import load_config
from kernelbench_rl.envs.kernel_env import EnvSpec
from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation import Evaluator
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings
from kernelbench_rl.integrations.openenv_env import EnvRequestError, KernelEnvService
from kernelbench_rl.problems import Problem, load_problems
from kernelbench_rl.compose import build_run_parts

REPO = Path(__file__).resolve().parents[1]
KERNRL = Path(os.environ.get("KBRL_KERNRL_ROOT") or REPO.parent / "shared" / "kernrl")
needs_kernrl = pytest.mark.skipif(not (KERNRL / "problems" / "level1").is_dir() and not (KERNRL / "level1").is_dir(),
                                  reason=f"no kernrl snapshot at {KERNRL} (set KBRL_KERNRL_ROOT)")


def test_problems_root_and_its_older_name_are_one_key():
    old = load_config("default", ["problems.kernelbench_root=/somewhere"])
    new = load_config("default", ["problems.root=/somewhere"])
    assert old.problems.source_root == new.problems.source_root == "/somewhere"
    assert old.resolved_run_id() == new.resolved_run_id() != load_config("default").resolved_run_id()
    with pytest.raises(UserError, match="problems.root and problems.kernelbench_root"):
        load_config("default", ["problems.root=/a", "problems.kernelbench_root=/b"])


@needs_kernrl
def test_the_config_key_brings_kernrl_problems_to_training_and_evaluation(tmp_path):
    config = load_config("default", [f"problems.root={KERNRL}", "problems.levels=[]", "problems.audit=false",
                                     "problems.ids=[L10_1,L1_23_Soft,L4/7,L4_2]", f"db_path={tmp_path / 'kb.duckdb'}"])
    parts = build_run_parts(config)
    trained = parts.split.training_problems(parts.audits)
    # Named in kernrl's forms; L4/7 needs `fla` (not installed): left out; a holdout one is never pulled in.
    assert {p.id for p in trained} <= {"L10/1", "L1/23", "L4/2"} and trained
    assert all(p.suite == "kernrl" for p in trained)
    held = parts.split.chosen("holdout")
    assert {p.level for p in held} == set(range(1, 11))  # every level of the source holds one out
    evaluator = parts.evaluator.open(store=None, problems=held)
    try:
        assert evaluator.problems_root == str(KERNRL)
        assert evaluator.problem("L10_1_SHA").id == "L10/1"  # beyond the problems it was given: from the source
    finally:
        evaluator.close()
    with pytest.raises(UserError, match="start of 8 problem ids"):
        named = build_run_parts(load_config("default", [f"problems.root={KERNRL}", "problems.levels=[]",
                                                        "problems.audit=false", "problems.ids=[L10_]"]))
        named.split.training_problems(named.audits)


@needs_kernrl
def test_the_env_server_resets_to_a_problem_named_in_any_form(tmp_path):
    problems = load_problems(KERNRL, levels=[1, 10])
    train, holdout = [p for p in problems if p.id != "L10/2"], [p for p in problems if p.id == "L10/2"]
    with Evaluator(EvalSettings(device="cpu")) as evaluator:
        service = KernelEnvService(evaluator, train, holdout, spec=EnvSpec(turns=1))
        # Observations name a kernrl problem in kernrl's form, as kernrl's own server does, however it was asked for.
        assert service.reset(problem_id="L1_23_Softmax").problem_id == "L1_23_Softmax"
        assert service.reset(problem_id="L1/23").problem_id == "L1_23_Softmax"
        assert service.reset(problem_id="L10_1").problem_id == "L10_1_SHA256_Single"
        assert service.reset(problem_id="L10_2_SHA", split="holdout").problem_id == "L10_2_SHA256_Batch"
        with pytest.raises(EnvRequestError) as refused:
            service.reset(problem_id="L10_2")
        assert refused.value.status_code == 403
        with pytest.raises(EnvRequestError) as ambiguous:
            service.reset(problem_id="L10_")
        assert ambiguous.value.status_code == 422 and "L10_1_SHA256_Single" in str(ambiguous.value)


# A problem with needs of its own: it asserts eval mode, takes an fp16 input whose dtype it checks, and draws an
# offset from Python's `random` (the candidate's process must draw the same one as the reference's).
NEEDY = '''import random

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = nn.Parameter(torch.randn(N))

    def forward(self, x, offset):
        assert not self.training, "inference only"
        assert x.dtype == torch.float16, x.dtype
        return x.float() * self.scale + offset


N = 64


def get_inputs():
    return [torch.randn(N, dtype=torch.float16), random.randint(0, 1000) / 1000]


def get_init_inputs():
    return []
'''


@pytest.mark.parametrize("suite", ["kernelbench", "kernrl"])
def test_a_problem_runs_as_it_requires_for_reference_and_candidate(suite, shared_evaluator):
    problem = Problem(level=9, number=1, name="1_Needy", source=NEEDY, origin="inline", suite=suite)
    assert problem.eval_mode  # asserted by its source, whatever the suite
    settings = EvalSettings(device="cpu", size="small")
    with shared_evaluator(settings, problems={problem.id: problem}, static_checks=False) as evaluator:
        right, wrong = evaluator.evaluate([
            EvalRequest(problem.id, NEEDY + "\nModelNew = Model\n", settings),
            EvalRequest(problem.id, NEEDY.replace("+ offset", "+ offset + 0.5") + "\nModelNew = Model\n", settings),
        ])
    assert right.correct, right.error_message
    assert wrong.error_category is ErrorCategory.MISMATCH
