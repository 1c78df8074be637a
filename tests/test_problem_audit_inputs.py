"""`kernelbench-rl problems audit`: which problems' inputs can tell a right kernel from a wrong one, the widened
inputs that fix the rest, training leaving out what cannot be fixed, and the evaluator using what the audit
chose (tanh-GELU passes exact GELU on torch.rand's [0, 1) and must not)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelbench_rl.cli import app
from kernelbench_rl.config import load_config
from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings
from kernelbench_rl.problems import get_problem, load_problems, load_solution
from kernelbench_rl.problems.audit import audit_problems, audit_set, audited_set, counts
from kernelbench_rl.compose import build_run_parts

runner = CliRunner()

_OP = """import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        return {expr}


N = 64


def get_inputs():
    return [torch.rand(N, N)]


def get_init_inputs():
    return []
"""


def _checkout(root: Path, ops: dict[int, str]) -> Path:
    folder = root / "KernelBench" / "level1"
    folder.mkdir(parents=True)
    for number, expr in ops.items():
        (folder / f"{number}_Op{number}.py").write_text(_OP.format(expr=expr))
    return root


def test_the_bundled_set_passes_the_audit_with_widened_inputs_where_its_own_cannot_tell(tmp_path):
    out = tmp_path / "audit.json"
    result = runner.invoke(app, ["problems", "audit", "--level", "1", "--json", str(out)])
    assert result.exit_code == 0, result.output
    data = json.loads(out.read_text())
    by_id = {p["problem_id"]: p for p in data["problems"]}
    assert data["counts"]["fails"] == 0 and data["counts"]["unavailable"] == 0
    for problem_id in ("L1/19", "L1/20", "L1/32"):  # the op is the identity on torch.rand's [0, 1)
        assert by_id[problem_id]["status"] == "widened"
        assert by_id[problem_id]["trivial"] == ["the first input returned"]
    for problem_id, sibling in (("L1/26", "L1/88"), ("L1/88", "L1/26")):  # exact and tanh GELU agree on [0, 1)
        assert by_id[problem_id]["status"] == "widened" and by_id[problem_id]["siblings"] == [sibling]
        assert by_id[problem_id]["given_variant"]
    assert by_id["L1/21"]["status"] == "ok"
    assert "L1/19" in result.output and "widened: 5" in result.output


def test_degenerate_and_broken_problems_fail_or_are_unavailable_and_training_leaves_them_out(tmp_path):
    root = _checkout(tmp_path, {1: "torch.relu(x)", 2: "x.sum(1) * 0 + 3.0", 3: "torch.sigmoid(x)",
                                4: "torch.tanh(x) + __import__('no_such_module').f(x)", 5: "torch.relu(x) * 2"})
    audits = {a.problem_id: a for a in audit_problems(load_problems(root))}
    assert audits["L1/1"].status == "widened"
    assert audits["L1/2"].status == "fails" and "a constant (another seed's mean)" in audits["L1/2"].trivial
    assert audits["L1/3"].status == "ok"
    assert audits["L1/4"].status == "unavailable" and "no_such_module" in audits["L1/4"].detail
    assert counts(audits.values()) == {"ok": 2, "widened": 1, "fails": 1, "unavailable": 1}

    config = load_config("default", [f"problems.kernelbench_root={root}", "problems.levels=[1]",
                                      "problems.holdout_fraction=0.0"])
    parts = build_run_parts(config)
    assert [p.id for p in parts.split.training_problems(parts.audits)] == ["L1/1", "L1/3", "L1/5"]
    unaudited = load_config("default", [f"problems.kernelbench_root={root}", "problems.levels=[1]",
                                        "problems.holdout_fraction=0.0", "problems.audit=false"])
    parts = build_run_parts(unaudited)
    assert len(parts.split.training_problems(parts.audits)) == 5


def test_audit_refuses_bad_options_in_one_sentence():
    for args, sentence in ((["--size", "medium"], "--size must be small or real"), (["--ids", "L1/999"], "No problem L1/999")):
        done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "problems", "audit", *args],
                              capture_output=True, text=True, timeout=120)
        assert done.returncode == 2 and sentence in done.stderr and "Traceback" not in done.stderr, done.stderr


@pytest.fixture(scope="module")
def evaluator():
    audits, variants = audited_set(load_problems(levels=[1]))
    # One call gives the audits and the widened inputs they hand the evaluator: those another problem's
    # reference passes on the problem's own inputs.
    assert set(variants) == {"L1/26", "L1/88"}
    assert variants == {pid: a.variant for pid, a in audits.items() if a.given_variant} and all(variants.values())
    assert audit_set(load_problems(levels=[1])) == audits
    ev = Evaluator(EvalSettings(device="cpu", timeout_s=60), static_checks=False, parallel_compiles=2,
                   input_variants=variants)
    try:
        yield ev
    finally:
        ev.close()


def test_the_evaluator_uses_the_widened_inputs_the_audit_hands_it(evaluator):
    settings = EvalSettings(device="cpu", timeout_s=60)
    tanh_gelu = load_solution(get_problem("L1/88"))
    exact_gelu = load_solution(get_problem("L1/26"))
    wrong, right, own = evaluator.evaluate([EvalRequest("L1/26", tanh_gelu, settings),
                                            EvalRequest("L1/26", exact_gelu, settings),
                                            EvalRequest("L1/88", tanh_gelu, settings)])
    assert wrong.error_category == ErrorCategory.MISMATCH, wrong.error_message
    assert "given by the problem audit" in wrong.versions["inputs"]
    assert right.correct and own.correct, (right.error_message, own.error_message)


def test_without_the_audits_inputs_tanh_gelu_passes_exact_gelu(monkeypatch):
    """What the widened inputs are for (so the test above can fail). The sensitivity seeds are off here: their
    perturbed inputs reach past [0, 1) and tell the two apart as well (evaluation/verdict/sensitivity.py)."""
    monkeypatch.setenv("KBRL_EVAL_SENSITIVITY", "off")
    with Evaluator(EvalSettings(device="cpu", timeout_s=60), static_checks=False, parallel_compiles=1) as ev:
        (result,) = ev.evaluate([EvalRequest("L1/26", load_solution(get_problem("L1/88")), EvalSettings(device="cpu"))])
    assert result.correct
