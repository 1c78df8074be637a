"""Checkpoint evaluation: rows per level, the side-by-side table, the plot, clear errors, and
metric plumbing checked against hand-computed pass@k / fast_p / geomean.

The policy (tiny local model), the store and the training run are real. The tiny model never
writes a working kernel, so the metric-plumbing test scripts the evaluator's verdicts through a
stand-in `evaluate_fn` (the real evaluator is tested elsewhere); one test uses the real evaluator.
"""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.config.schema import TrainConfig
from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult, Flag
from kernelbench_rl.problems.loaders import BUNDLED_ROOT
from kernelbench_rl.store import Store
from kernelbench_rl.training import run_training
from kernelbench_rl.training.checkpoint_eval import (
    BASE, CheckpointReport, evaluate_checkpoint, markdown_table, speedup_plot,
)

PROBLEM_FILES = {"L1/19": "level1/19_ReLU.py", "L2/102": "level2/102_Matmul_Subtract_Multiply_ReLU.py"}
RUN_ID = "ckpt-eval"
PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def verdict(problem_id: str, *, format_ok: bool = True, compiled: bool = False, correct: bool = False,
            speedup: float | None = None, flags: tuple[str, ...] = ()) -> EvalResult:
    if correct:
        category = ErrorCategory.OK
    elif compiled:
        category = ErrorCategory.MISMATCH
    else:
        category = ErrorCategory.COMPILE if format_ok else ErrorCategory.FORMAT
    return EvalResult(problem_id=problem_id, candidate_sha256="0" * 64, backend="triton", precision="fp32",
                      device_kind="cuda", format_ok=format_ok, compiled=compiled, correct=correct,
                      speedup=speedup, error_category=category, flags=list(flags))


# Four samples per problem, half of them correct, timed on a (pretend) GPU.
SCRIPT: dict[str, list[dict]] = {
    "L1/19": [
        dict(compiled=True, correct=True, speedup=2.0),
        dict(compiled=True, correct=True, speedup=0.5),
        dict(compiled=True, correct=False),
        dict(format_ok=False),
    ],
    "L2/102": [
        dict(compiled=True, correct=True, speedup=1.2),
        # a detected hack counts as incorrect, whatever its timing says
        dict(compiled=True, correct=True, speedup=5.0, flags=(Flag.HACK.value,)),
        # right values, but an unverified excessive speedup is not trusted: neither correct nor a speedup
        dict(compiled=True, correct=True, speedup=50.0, flags=(Flag.EXCESSIVE_SPEEDUP.value,)),
        dict(compiled=False),
    ],
}


@dataclass
class ScriptedEvaluator:
    """Honours EvaluateFn: the n-th response judged for a problem gets that problem's n-th scripted verdict."""

    calls: Counter = field(default_factory=Counter)

    def __call__(self, problem_ids: list[str], responses: list[str]) -> list[EvalResult]:
        out = []
        for pid in problem_ids:
            out.append(verdict(pid, **SCRIPT[pid][self.calls[pid]]))
            self.calls[pid] += 1
        return out


def _judge_for_training(problem_ids: list[str], responses: list[str]) -> list[EvalResult]:
    return [verdict(pid, format_ok=len(r) % 2 == 0) for pid, r in zip(problem_ids, responses)]


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> TrainConfig:
    """A KernelBench checkout with one level-1 and one level-2 problem, and a run trained for one step."""
    tmp = tmp_path_factory.mktemp("ckpt_eval")
    root = tmp / "KernelBench"
    for rel in PROBLEM_FILES.values():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(BUNDLED_ROOT / rel, root / rel)
    cfg = load_config("default", [
        f"db_path={tmp / 'kb.duckdb'}", f"log_dir={tmp / 'logs'}", f"run_id={RUN_ID}", "policy.backend=local",
        "policy.base_model=local:tiny", "policy.lora_rank=4", "training.steps=1", "training.batch_problems=2",
        "sampling.group_size=2", "sampling.max_tokens=16", "training.checkpoint_every=1",
        f"problems.kernelbench_root={root}", "problems.levels=[1,2]", "problems.holdout_fraction=0",
        "eval.device=cpu", "eval.size=small", "curriculum.enabled=false",
    ])
    summary = run_training(build_run_parts(cfg, policy_beside=True), progress=False, evaluate_fn=_judge_for_training)
    assert summary.finished
    return cfg


@pytest.fixture(scope="module")
def scripted_report(trained: TrainConfig) -> tuple[CheckpointReport, ScriptedEvaluator]:
    judge = ScriptedEvaluator()
    report = evaluate_checkpoint(build_run_parts(trained, policy_beside=True), checkpoint=BASE, samples_per_problem=4, split="all", ks=(1, 2, 10),
                                 evaluate_fn=judge)
    return report, judge


def _expected(level: int | None) -> dict:
    """Hand-computed from SCRIPT. Correct per problem (of 4): L1/19 2; L2/102 1 (the hack and the
    unverified 50x do not count). pass@2 with n=4: c=2 -> 1 - C(2,2)/C(4,2) = 5/6; c=1 -> 1 - C(3,2)/C(4,2) = 1/2."""
    best = {1: 2.0, 2: 1.2}  # best counted speedup per problem
    counted = {1: [2.0, 0.5], 2: [1.2]}  # correct samples with a counted speedup
    correct = {1: 2, 2: 1}
    pass_at_2 = {1: 5 / 6, 2: 1 / 2}
    levels = [1, 2] if level is None else [level]
    speedups = [s for lv in levels for s in counted[lv]]
    return {
        "num_problems": len(levels), "samples_per_problem": 4, "compile_rate": 0.75,
        "correct_rate": sum(correct[lv] for lv in levels) / (4 * len(levels)),
        "pass_at_k": {"pass@1": sum(correct[lv] / 4 for lv in levels) / len(levels),
                      "pass@2": sum(pass_at_2[lv] for lv in levels) / len(levels)},  # pass@10 needs 10 samples
        "fast_p": {f"fast_{p:g}": sum(best[lv] > p for lv in levels) / len(levels)
                   for p in (0.0, 0.5, 0.8, 1.0, 1.5, 2.0)},
        "geomean_speedup": math.prod(speedups) ** (1 / len(speedups)),
        "unjudged_samples": 0, "problems_without_verdict": 0,
    }


def _assert_metrics(actual: dict, expected: dict) -> None:
    assert actual.keys() == expected.keys()
    for key, value in expected.items():
        if isinstance(value, dict):
            assert actual[key].keys() == value.keys(), key
            for sub, v in value.items():
                assert actual[key][sub] == pytest.approx(v), (key, sub)
        else:
            assert actual[key] == pytest.approx(value), key


def test_scripted_verdicts_give_hand_computed_metrics(scripted_report) -> None:
    report, judge = scripted_report
    assert judge.calls == {"L1/19": 4, "L2/102": 4}
    assert report.label == BASE and len(report.outcomes) == 8
    # spot-check the hand computation itself
    assert _expected(None)["fast_p"] == {"fast_0": 1.0, "fast_0.5": 1.0, "fast_0.8": 1.0, "fast_1": 1.0,
                                         "fast_1.5": 0.5, "fast_2": 0.0}
    _assert_metrics(report.overall.to_dict(), _expected(None))
    assert sorted(report.per_level) == [1, 2]
    for level in (1, 2):
        _assert_metrics(report.per_level[level].to_dict(), _expected(level))


def test_eval_reports_rows_hold_the_metrics_per_level_and_overall(trained: TrainConfig, scripted_report) -> None:
    report, _ = scripted_report
    rows = Store(trained.db_path).query(
        "SELECT report_id, checkpoint, split, level, num_problems, samples_per_problem, metrics_json "
        "FROM eval_reports WHERE eval_id = ? ORDER BY report_id", [report.eval_id]).to_dicts()
    assert [r["report_id"] for r in rows] == [
        f"{RUN_ID}|base|all|{level}|{report.eval_id}" for level in ("L1", "L2", "all")]
    by_level = {r["level"]: r for r in rows}
    assert set(by_level) == {1, 2, None}
    for level, row in by_level.items():
        assert row["split"] == "all" and row["samples_per_problem"] == 4
        assert row["num_problems"] == (2 if level is None else 1)
        _assert_metrics(json.loads(row["metrics_json"]), _expected(level))


def test_latest_checkpoint_with_the_real_evaluator(trained: TrainConfig, scripted_report, tmp_path: Path) -> None:
    """The newest checkpoint of the run is loaded and judged by the real evaluator; then table and plot."""
    report = evaluate_checkpoint(build_run_parts(trained, policy_beside=True), checkpoint="latest", samples_per_problem=1, split="all")
    assert report.label == "step_000000"
    rows = Store(trained.db_path).query(
        "SELECT level, metrics_json FROM eval_reports WHERE run_id = ? AND checkpoint = 'step_000000'",
        [RUN_ID]).to_dicts()
    assert sorted(rows, key=lambda r: r["level"] or 0)[0]["level"] is None and len(rows) == 3
    for row in rows:
        metrics = json.loads(row["metrics_json"])
        assert {"compile_rate", "correct_rate", "pass_at_k", "fast_p", "geomean_speedup"} <= metrics.keys()
        assert "pass@1" in metrics["pass_at_k"]
        assert metrics["fast_p"] == {}  # CPU runs claim no speedups

    base, _ = scripted_report
    table = markdown_table([base, report])
    lines = table.splitlines()
    assert lines[0] == "| metric | base (all) | step_000000 (all) |"
    assert all(line.count("|") == 4 for line in lines), table
    rows_by_metric = {line.split("|")[1].strip(): [c.strip() for c in line.split("|")[2:4]] for line in lines[2:]}
    for metric in ("compile_rate", "correct_rate", "pass@1", "pass@2", "fast_0", "fast_0.5", "fast_0.8",
                   "fast_1", "fast_1.5", "fast_2", "geomean speedup", "L1 correct_rate", "L2 correct_rate"):
        assert metric in rows_by_metric, metric
    assert rows_by_metric["pass@2"] == [f"{_expected(None)['pass_at_k']['pass@2']:.3f}", "-"]
    assert rows_by_metric["fast_1.5"] == ["0.500", "-"]
    assert rows_by_metric["num_problems"] == ["2", "2"]

    plot = speedup_plot([base, report], tmp_path / "plots" / "speedups.png")
    assert plot.read_bytes()[:8] == PNG_MAGIC
    empty = speedup_plot([report], tmp_path / "none.png")  # nothing timed: still a valid image
    assert empty.read_bytes()[:8] == PNG_MAGIC


def test_each_evaluation_keeps_its_own_rows(trained: TrainConfig) -> None:
    """Evaluating a checkpoint again adds rows (with their own time): its history is one query."""
    first = evaluate_checkpoint(build_run_parts(trained, policy_beside=True), checkpoint=BASE, samples_per_problem=4, split="all", evaluate_fn=ScriptedEvaluator())
    second = evaluate_checkpoint(build_run_parts(trained, policy_beside=True), checkpoint=BASE, samples_per_problem=4, split="all", evaluate_fn=ScriptedEvaluator())
    assert first.eval_id != second.eval_id
    history = Store(trained.db_path).query(
        "SELECT eval_id, created_at, metrics_json FROM eval_reports "
        "WHERE run_id = ? AND checkpoint = 'base' AND level IS NULL ORDER BY created_at", [RUN_ID]).to_dicts()
    ids = [row["eval_id"] for row in history]
    assert first.eval_id in ids and second.eval_id in ids and len(set(ids)) == len(ids)
    assert ids.index(first.eval_id) < ids.index(second.eval_id)


def test_every_sample_of_an_evaluation_is_kept_with_its_verdict(scripted_report, trained: TrainConfig) -> None:
    """"Which samples of checkpoint X failed, and why" is one query."""
    report, _ = scripted_report
    failed = Store(trained.db_path).query(
        "SELECT problem_id, sample_index, error_category, error_message FROM eval_samples "
        "WHERE eval_id = ? AND NOT correct ORDER BY problem_id, sample_index", [report.eval_id]).to_dicts()
    assert [(r["problem_id"], r["sample_index"], r["error_category"]) for r in failed] == [
        ("L1/19", 2, "mismatch"), ("L1/19", 3, "format"),
        ("L2/102", 1, "ok"), ("L2/102", 2, "ok"), ("L2/102", 3, "compile")]  # the hack and the unverified 50x
    every = Store(trained.db_path).query(
        "SELECT s.correct, s.speedup, b.text FROM eval_samples s JOIN blobs b ON b.sha256 = s.completion_sha256 "
        "WHERE s.eval_id = ? ORDER BY s.problem_id, s.sample_index", [report.eval_id]).to_dicts()
    assert [r["correct"] for r in every] == [True, True, False, False, True, False, False, False]
    assert [r["speedup"] for r in every][:2] == [2.0, 0.5]


def test_the_table_has_every_metric_per_level_even_untimed(trained: TrainConfig) -> None:
    untimed = evaluate_checkpoint(build_run_parts(trained, policy_beside=True), checkpoint=BASE, samples_per_problem=2, split="all",
                                  evaluate_fn=lambda pids, responses: [verdict(p, compiled=True, correct=True) for p in pids])
    names = [line.split("|")[1].strip() for line in markdown_table([untimed]).splitlines()[2:]]
    for prefix in ("", "L1 ", "L2 "):
        for metric in ("compile_rate", "correct_rate", "pass@1", "fast_0", "fast_0.5", "fast_0.8",
                       "fast_1", "fast_1.5", "fast_2", "geomean speedup"):
            assert prefix + metric in names, prefix + metric


def _one_sentence(err: pytest.ExceptionInfo) -> str:
    message = str(err.value)
    assert "\n" not in message and message.endswith(".") and message.count(". ") == 0, message
    return message


def test_unknown_checkpoint_name_is_a_user_error(trained: TrainConfig) -> None:
    with pytest.raises(UserError) as err:
        evaluate_checkpoint(build_run_parts(trained, policy_beside=True), checkpoint="step_999999", evaluate_fn=ScriptedEvaluator())
    assert "step_999999" in _one_sentence(err)


def test_a_run_without_checkpoints_is_a_user_error(trained: TrainConfig) -> None:
    fresh = dataclasses.replace(trained, run_id="never-trained")
    with pytest.raises(UserError) as err:
        evaluate_checkpoint(build_run_parts(fresh, policy_beside=True), checkpoint="latest", evaluate_fn=ScriptedEvaluator())
    assert "never-trained" in _one_sentence(err)


def test_unknown_split_is_a_user_error(trained: TrainConfig) -> None:
    with pytest.raises(UserError) as err:
        evaluate_checkpoint(build_run_parts(trained, policy_beside=True), checkpoint=BASE, split="validation", evaluate_fn=ScriptedEvaluator())
    _one_sentence(err)


def test_an_evaluation_with_no_verdict_raises_after_its_rows_are_recorded(trained: TrainConfig) -> None:
    """Every sample without a verdict on its kernel (our fault): NoVerdictError, one line naming the first cause
    and the eval_id, and that evaluation's rows are in the store all the same (its samples marked infra)."""
    from kernelbench_rl.errors import NoVerdictError

    def lost(problem_ids: list[str], responses: list[str]) -> list[EvalResult]:
        return [dataclasses.replace(verdict(pid), error_category=ErrorCategory.INFRA, error_message="worker lost")
                for pid in problem_ids]

    with pytest.raises(NoVerdictError) as err:
        evaluate_checkpoint(build_run_parts(trained, policy_beside=True), checkpoint=BASE, split="all",
                            samples_per_problem=1, evaluate_fn=lost)
    sentence = str(err.value)
    assert "\n" not in sentence and "No sample of base was judged" in sentence and "worker lost" in sentence
    eval_id = sentence.split("eval_id ")[1].split()[0]
    rows = Store(trained.db_path).fetchall("SELECT error_category FROM eval_samples WHERE eval_id = ?", [eval_id])
    assert [r[0] for r in rows] == ["infra", "infra"]
    assert Store(trained.db_path).fetchall("SELECT count(*) FROM eval_reports WHERE eval_id = ?", [eval_id])[0][0] == 3


@dataclass
class RecordingSampler:
    """Delegates to the real sampling client and keeps the decoded prompts it was sent."""

    inner: object
    prompts: list[str]

    def get_tokenizer(self):
        return self.inner.get_tokenizer()

    def sample(self, *, prompt, num_samples, sampling_params):
        self.prompts.append(self.inner.get_tokenizer().decode(prompt.to_ints()))
        return self.inner.sample(prompt=prompt, num_samples=num_samples, sampling_params=sampling_params)


@dataclass
class RecordingService:
    inner: object
    prompts: list[str] = field(default_factory=list)

    def create_sampling_client(self, **kwargs):
        client = self.inner.create_sampling_client(**kwargs)
        client = client.result() if callable(getattr(client, "result", None)) else client
        return RecordingSampler(client, self.prompts)


def test_retrieved_examples_reach_the_evaluation_prompts(trained: TrainConfig, tmp_path: Path) -> None:
    """An RA-ICL run is evaluated on the prompts it trained on: `config.rag.k` retrieved examples each."""
    from kernelbench_rl.envs.prompts import PromptExample
    from kernelbench_rl.policy import PolicyConfig, make_service_client

    cfg = dataclasses.replace(trained, rag=dataclasses.replace(trained.rag, enabled=True, k=1))
    asked: list[tuple[str, int]] = []

    def retrieve(problem, k: int) -> list[PromptExample]:
        asked.append((problem.id, k))
        marker = f"retrieved_for_{problem.id.replace('/', '_')}"
        return [PromptExample(pytorch_code="import torch", kernel_code=f"# {marker}\nimport triton", backend="triton",
                              title=marker)]

    service = RecordingService(make_service_client(PolicyConfig(backend="local", base_model="local:tiny", seed=0)))
    evaluate_checkpoint(build_run_parts(cfg, policy_beside=True), checkpoint=BASE, samples_per_problem=1, split="all", evaluate_fn=ScriptedEvaluator(),
                        retrieve=retrieve, service_client=service, store=Store(tmp_path / "own.duckdb"))
    assert sorted(asked) == [("L1/19", 1), ("L2/102", 1)]
    assert len(service.prompts) == 2
    for problem_id in ("L1/19", "L2/102"):
        marker = f"retrieved_for_{problem_id.replace('/', '_')}"
        assert sum(marker in p for p in service.prompts) == 1, marker


def test_an_episodes_best_turn_is_never_a_hack_or_an_uncounted_speedup() -> None:
    """Kevin mode: a later hacked or unverified-excessive turn must not outrank an honest correct one."""
    from kernelbench_rl.envs.kernel_env import EnvSpec, KernelEnv
    from kernelbench_rl.problems import get_problem
    from kernelbench_rl.training.checkpoint_eval import episode_outcome

    def episode(*turns: dict) -> KernelEnv:
        env = KernelEnv(get_problem("L1/19"), EnvSpec(turns=len(turns)))
        for turn in turns:
            env.add_completion("p", [1], "c", [2], [0.0], "stop")
            env.add_result(verdict("L1/19", **turn))
        return env

    honest = dict(compiled=True, correct=True, speedup=1.5)
    hacked = episode(honest, dict(compiled=True, correct=True, speedup=5.0, flags=(Flag.HACK.value,)))
    assert (episode_outcome(hacked).correct, episode_outcome(hacked).speedup) == (True, 1.5)
    fishy = episode(honest, dict(compiled=True, correct=True, speedup=50.0, flags=(Flag.EXCESSIVE_SPEEDUP.value,)))
    assert episode_outcome(fishy).speedup == 1.5
    only_hack = episode(dict(compiled=True, correct=True, speedup=5.0, flags=(Flag.HACK.value,)))
    assert not episode_outcome(only_hack).correct and episode_outcome(only_hack).compiled
