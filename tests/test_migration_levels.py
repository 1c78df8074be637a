"""Migration 14 back-fills each row's suite from what the row tells, and levels past 3 are kernrl's alone: at the
boundary (level 3 against level 4) and at every level from 1 to 8, in every table the migration touches (problems,
rollouts, rewards, evaluations, eval_samples, baselines), on a database written before the migration."""

from __future__ import annotations

import json

import pytest

from kernelbench_rl.store import Store
from kernelbench_rl.store.schema import MIGRATIONS

SUITE_MIGRATION = 14
LEVELS = range(1, 9)
ORIGINS = ("bundled", "kernelbench_root", "hf", "kernrl_root")


def level_rule(level: int) -> str | None:
    """What a row that tells nothing else gets from its level: kernrl past level 3, else left unknown."""
    return "kernrl" if level > 3 else None


def problem_suite(origin: str, level: int) -> str:
    if origin == "kernrl_root" or (origin == "bundled" and level > 3):
        return "kernrl"
    return "kernelbench"


@pytest.fixture(scope="module")
def migrated(tmp_path_factory) -> Store:
    """A database written before migration 14, with rows at every level (a verdict's suite on some), then opened as of now."""
    path = tmp_path_factory.mktemp("migration") / "old.duckdb"
    old = Store(path, migrations=[m for m in MIGRATIONS if m[0] < SUITE_MIGRATION])
    old.init()
    assert old.schema_version() < SUITE_MIGRATION
    problems, baselines, rollouts, rewards, samples = [], [], [], [], []
    for level in LEVELS:
        pid = f"L{level}/1"
        for origin in ORIGINS:
            problems.append({"problem_id": pid, "source_sha256": f"{origin}-{level}", "level": level, "number": 1,
                             "name": "1_Op", "origin": origin})
            baselines.append({"problem_id": pid, "source_sha256": f"{origin}-{level}", "precision": "fp32",
                              "hardware": "h", "size": "small", "eager_ms": float(level)})
        # sample 0: no verdict to tell its suite; 1: a KernelBench verdict; 2: a kernrl verdict
        for index, eval_key in enumerate((None, f"kb-{level}", f"kr-{level}")):
            rollouts.append({"run_id": "r", "step": 0, "problem_id": pid, "sample_index": index, "turn": 0,
                             "level": level, "eval_key": eval_key})
            rewards.append({"run_id": "r", "step": 0, "problem_id": pid, "sample_index": index, "turn": 0,
                            "reward": float(level)})
            samples.append({"eval_id": "e", "run_id": "r", "checkpoint": "base", "split": "holdout", "problem_id": pid,
                            "level": level, "sample_index": index, "turn": 0, "eval_key": eval_key})
    old.upsert("problems", problems)
    old.upsert("baselines", baselines)
    old.upsert("evaluations", [
        *({"eval_key": f"kb-{level}", "problem_id": f"L{level}/1",
           "result_json": json.dumps({"versions": {"suite": "kernelbench"}})} for level in LEVELS),
        *({"eval_key": f"kr-{level}", "problem_id": f"L{level}/1",
           "result_json": json.dumps({"versions": {"suite": "kernrl"}})} for level in LEVELS),
        *({"eval_key": f"none-{level}", "problem_id": f"L{level}/1", "result_json": json.dumps({"versions": {}})}
          for level in LEVELS),
    ])
    old.upsert("rollouts", rollouts)
    old.upsert("rewards", rewards)
    old.upsert("eval_samples", samples)
    store = Store(path)
    assert store.migrate() >= SUITE_MIGRATION
    return store


def _suites(store: Store, sql: str) -> dict:
    return {tuple(row[:-1]): row[-1] for row in store.fetchall(sql)}


def test_problems_and_their_baselines_past_level_3_of_the_bundled_set_are_kernrls(migrated):
    expected = {(f"L{level}/1", f"{origin}-{level}"): problem_suite(origin, level)
                for level in LEVELS for origin in ORIGINS}
    assert _suites(migrated, "SELECT problem_id, source_sha256, suite FROM problems") == expected
    assert _suites(migrated, "SELECT problem_id, source_sha256, suite FROM baselines") == expected
    # the boundary itself, spelt out
    assert expected[("L3/1", "bundled-3")] == "kernelbench" and expected[("L4/1", "bundled-4")] == "kernrl"


@pytest.mark.parametrize("table", ["rollouts", "eval_samples"])
def test_a_row_without_a_verdict_is_kernrls_past_level_3_and_unknown_up_to_it(migrated, table):
    got = _suites(migrated, f"SELECT problem_id, suite FROM {table} WHERE sample_index = 0")
    assert got == {(f"L{level}/1",): level_rule(level) for level in LEVELS}
    assert got[("L3/1",)] is None and got[("L4/1",)] == "kernrl"


@pytest.mark.parametrize("table", ["rollouts", "eval_samples"])
def test_a_rows_verdict_names_its_suite_at_every_level(migrated, table):
    got = _suites(migrated, f"SELECT problem_id, sample_index, suite FROM {table} WHERE sample_index > 0")
    assert got == {**{(f"L{level}/1", 1): "kernelbench" for level in LEVELS},
                   **{(f"L{level}/1", 2): "kernrl" for level in LEVELS}}


def test_rewards_follow_their_rollout_at_every_level(migrated):
    rollouts = _suites(migrated, "SELECT problem_id, sample_index, suite FROM rollouts")
    rewards = _suites(migrated, "SELECT problem_id, sample_index, suite FROM rewards")
    assert rewards == rollouts
    assert rewards[("L3/1", 0)] is None and rewards[("L4/1", 0)] == "kernrl"


def test_evaluations_take_their_results_word_and_no_level_rule(migrated):
    got = _suites(migrated, "SELECT eval_key, suite FROM evaluations")
    assert got == {**{(f"kb-{level}",): "kernelbench" for level in LEVELS},
                   **{(f"kr-{level}",): "kernrl" for level in LEVELS},
                   **{(f"none-{level}",): None for level in LEVELS}}


def test_nothing_but_the_suite_changed_and_the_migration_runs_once(migrated):
    assert migrated.fetchall("SELECT count(*), sum(reward) FROM rewards") == [(3 * len(LEVELS), 3.0 * sum(LEVELS))]
    assert migrated.fetchall("SELECT count(*) FROM problems") == [(len(ORIGINS) * len(LEVELS),)]
    assert migrated.fetchall("SELECT count(*) FROM eval_samples") == [(3 * len(LEVELS),)]
    assert migrated.fetchall("SELECT count(*) FROM schema_migrations WHERE version = ?", [SUITE_MIGRATION]) == [(1,)]


def test_a_reward_follows_its_own_rollout_and_a_baseline_its_own_problem(tmp_path):
    """Rows that share all but one key column (the run, the step, the turn; a problem's id with its source) take the
    suite of their own row, never their neighbour's."""
    path = tmp_path / "keys.duckdb"
    old = Store(path, migrations=[m for m in MIGRATIONS if m[0] < SUITE_MIGRATION])
    suites = ("kernelbench", "kernrl")
    old.upsert("evaluations", [{"eval_key": suite, "problem_id": "L1/1",
                                "result_json": json.dumps({"versions": {"suite": suite}})} for suite in suites])
    keys = [(run, step, turn) for run in ("r1", "r2") for step in (1, 2) for turn in (0, 1)]
    expected = {key: suites[sum(key[1:]) % 2 if key[0] == "r1" else 1 - sum(key[1:]) % 2] for key in keys}
    old.upsert("rollouts", [{"run_id": run, "step": step, "problem_id": "L1/1", "sample_index": 0, "turn": turn,
                             "level": 1, "eval_key": expected[(run, step, turn)]} for run, step, turn in keys])
    old.upsert("rewards", [{"run_id": run, "step": step, "problem_id": "L1/1", "sample_index": 0, "turn": turn,
                            "reward": 0.0} for run, step, turn in keys])
    # one source under two ids: a level-2 problem of KernelBench and a level-4 one of the bundled kernrl set
    old.upsert("problems", [{"problem_id": pid, "source_sha256": "same", "level": level, "number": 1, "name": "1_Op",
                             "origin": "bundled"} for pid, level in (("L2/1", 2), ("L4/1", 4))])
    old.upsert("baselines", [{"problem_id": pid, "source_sha256": "same", "precision": "fp32", "hardware": "h",
                              "size": "small", "eager_ms": 1.0} for pid in ("L2/1", "L4/1")])
    store = Store(path)
    store.migrate()
    rewards = {tuple(row[:3]): row[3] for row in store.fetchall("SELECT run_id, step, turn, suite FROM rewards")}
    assert rewards == expected
    assert dict(store.fetchall("SELECT problem_id, suite FROM baselines")) == {"L2/1": "kernelbench", "L4/1": "kernrl"}
