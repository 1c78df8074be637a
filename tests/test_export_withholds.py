"""What `kernelbench-rl export` publishes of a verdict: a speedup only where it counts (never a hack's, an unconfirmed
excessive one's or one under a flag of doubt), a kernel as correct only where it counts as correct (never a hack), and
at most `--limit` rows, the first ones in the export's order, with the rest counted as left out.

Verdicts are written straight into a DuckDB file (no evaluator); the rows are read with `trajectory_rows` and, for the
command's own checks, through the CLI in this process."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation.result import DOUBT_FLAGS, ErrorCategory, EvalResult, Flag
from kernelbench_rl.rewards.shaping import counts_as_correct
from kernelbench_rl.store import Store
from kernelbench_rl.trajectories import TrajectoryFilter, read_trajectories, trajectory_rows

PROBLEM = "L1/19"
HACK, EXCESSIVE, REVERIFIED = Flag.HACK.value, Flag.EXCESSIVE_SPEEDUP.value, Flag.REVERIFIED.value
# name -> (correct, speedup, flags)
VERDICTS: dict[str, tuple[bool, float | None, tuple[str, ...]]] = {
    "honest": (True, 3.0, ()),
    "honest_on_the_cpu": (True, None, ()),
    "hack_backend_not_used": (True, 3.0, (Flag.BACKEND_NOT_USED.value, HACK)),
    "hack_clock_disagrees": (True, 6.0, (Flag.CLOCK_DISAGREES.value, HACK)),
    "excessive_unconfirmed": (True, 50.0, (EXCESSIVE, Flag.NEEDS_REVERIFICATION.value)),
    "excessive_reverified": (True, 50.0, (EXCESSIVE, Flag.NEEDS_REVERIFICATION.value, REVERIFIED)),
    "below_speed_of_light": (True, 4.0, (Flag.BELOW_SPEED_OF_LIGHT.value,)),
    "low_kernel_share": (True, 2.0, (Flag.LOW_KERNEL_SHARE.value,)),
    "wrong": (False, None, ()),
}
# Every flag alone on an otherwise honest timed verdict
SINGLE_FLAGS = [flag.value for flag in Flag]


def result(index: int, correct: bool, speedup: float | None, flags) -> EvalResult:
    return EvalResult(PROBLEM, f"{index:064x}", "triton", "fp32", "cuda", format_ok=True, compiled=True,
                      correct=correct, speedup=speedup, flags=list(flags), hardware="H200",
                      error_category=ErrorCategory.OK if correct else ErrorCategory.MISMATCH,
                      settings_hash="s", versions={"suite": "kernelbench"})


def write_run(store: Store, run_id: str, verdicts: list[tuple[bool, float | None, tuple[str, ...]]],
              holdout: set[int] = frozenset(), start: int = 0) -> list[EvalResult]:
    """One rollout per verdict (step 0, sample i) with its reward row; `holdout`: the samples of a held-out problem."""
    results = [result(start + i, *verdict) for i, verdict in enumerate(verdicts)]
    keys = store.record_evaluations(results)
    store.upsert("rollouts", [{"run_id": run_id, "step": 0, "problem_id": PROBLEM, "suite": "kernelbench",
                               "sample_index": i, "turn": 0, "stage": "speed", "level": 1, "eval_key": key,
                               "format_ok": True, "error_category": r.error_category.value}
                              for i, (key, r) in enumerate(zip(keys, results))])
    store.upsert("rewards", [{"run_id": run_id, "step": 0, "problem_id": PROBLEM, "sample_index": i, "turn": 0,
                              "stage": "speed", "reward": 1.0, "components_json": json.dumps({"holdout": i in holdout})}
                             for i in range(len(results))])
    return results


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    store = Store(tmp_path_factory.mktemp("export") / "kb.duckdb")
    store.init()
    write_run(store, "named", list(VERDICTS.values()))
    write_run(store, "flags", [(True, 3.0, (flag,)) for flag in SINGLE_FLAGS], start=100)
    return store


def exported(store: Store, run_id: str, **wanted) -> list[dict]:
    return trajectory_rows(store, TrajectoryFilter(run_ids=[run_id], include_holdout=True, **wanted)).rows


# -- speedups --------------------------------------------------------------------------------------------
def test_a_speedup_is_published_only_where_it_counts(store):
    rows = exported(store, "named")
    got = {name: row["speedup"] for name, row in zip(VERDICTS, rows, strict=True)}
    assert got == {"honest": 3.0, "honest_on_the_cpu": None, "hack_backend_not_used": None,
                   "hack_clock_disagrees": None, "excessive_unconfirmed": None, "excessive_reverified": 50.0,
                   "below_speed_of_light": None, "low_kernel_share": None, "wrong": None}


def test_every_flag_alone_withholds_the_speedup_exactly_when_it_is_doubt_a_hack_or_unconfirmed(store):
    withheld = DOUBT_FLAGS | {HACK, EXCESSIVE}
    rows = exported(store, "flags")
    got = {flag: row["speedup"] for flag, row in zip(SINGLE_FLAGS, rows, strict=True)}
    assert got == {flag: None if flag in withheld else 3.0 for flag in SINGLE_FLAGS}


# -- correctness -----------------------------------------------------------------------------------------
# The export's `correct` is the one kernelbench-rl counts everywhere (rewards.shaping.counts_as_correct): a verdict
# flagged as a hack, or an unconfirmed excessive speedup, keeps the evaluator's raw `correct` but is published as wrong.


def test_a_hack_or_an_unconfirmed_speedup_is_never_exported_as_correct(store):
    """A detected hack is no right kernel wherever kernelbench-rl counts one (rewards.shaping.counts_as_correct: the
    metrics, the checkpoint reports, the environment): the dataset must not hand it to others as one."""
    rows = exported(store, "named")
    results = [result(i, *verdict) for i, verdict in enumerate(VERDICTS.values())]
    got = {name: bool(row["correct"]) for name, row in zip(VERDICTS, rows, strict=True)}
    assert got == {name: counts_as_correct(r) for name, r in zip(VERDICTS, results, strict=True)}


def test_correct_only_leaves_out_hacks_and_unconfirmed_speedups(store):
    rows = exported(store, "named", correct_only=True)
    names = {row["sample_index"] for row in rows}
    assert names == {i for i, name in enumerate(VERDICTS)
                     if name in ("honest", "honest_on_the_cpu", "excessive_reverified", "below_speed_of_light",
                                 "low_kernel_share")}


# -- --limit --------------------------------------------------------------------------------------------
def test_a_limit_keeps_the_first_rows_in_order_and_counts_the_rest(store):
    everything = exported(store, "flags")
    order = [(row["run_id"], row["step"], row["problem_id"], row["sample_index"], row["turn"]) for row in everything]
    assert order == sorted(order)
    for limit in range(1, len(everything) + 2):
        export = trajectory_rows(store, TrajectoryFilter(run_ids=["flags"], include_holdout=True, limit=limit))
        assert export.rows == everything[:limit], limit
        assert export.left_out.get("over_limit", 0) == max(0, len(everything) - limit), limit


def test_rows_left_out_as_holdout_do_not_use_up_the_limit(tmp_path):
    store = Store(tmp_path / "kb.duckdb")
    store.init()
    write_run(store, "r", [(True, 2.0, ())] * 6, holdout={0, 2})
    export = trajectory_rows(store, TrajectoryFilter(run_ids=["r"], limit=3))
    assert [row["sample_index"] for row in export.rows] == [1, 3, 4]
    assert dict(export.left_out) == {"holdout": 2, "over_limit": 1}


def _cli(*args: str):
    from kernelbench_rl.cli import app

    return CliRunner().invoke(app, ["export", *args])


def test_the_command_writes_at_most_limit_rows_and_says_what_it_left_out(store, tmp_path):
    out = tmp_path / "two"
    done = _cli("--db", str(store.path), "--run-id", "named", "--include-holdout", "--limit", "2", "--format",
                "parquet", "--out", str(out))
    assert done.exit_code == 0, done.output
    assert "wrote 2 rows" in done.output and f"over_limit {len(VERDICTS) - 2}" in done.output
    assert [row["sample_index"] for row in read_trajectories(out)] == [0, 1]


@pytest.mark.parametrize("limit", ["0", "-3"])
def test_a_limit_below_one_is_refused_before_anything_is_written(store, tmp_path, limit):
    out = tmp_path / "none"
    done = _cli("--db", str(store.path), "--limit", limit, "--out", str(out))
    # the command's own refusal (kernelbench-rl's entry point prints it as one sentence with code 2)
    assert isinstance(done.exception, UserError), done.output
    assert str(done.exception) == f"--limit must be at least 1, not {limit}."
    assert not Path(out).exists()
