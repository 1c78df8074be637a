"""Store behaviour within one process, against real DuckDB files."""

from __future__ import annotations

import threading
from pathlib import Path

import duckdb
import pytest

from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalResult, EvalSettings, Flag
from kernelbench_rl.store import (
    Store,
    StoreMissingError,
    StoreSchemaError,
    StoreVersionError,
    default_db_path,
    eval_key_for,
    sha256_text,
)
from kernelbench_rl.store.db import ARROW_BATCH_MIN_ROWS
from kernelbench_rl.store.schema import MIGRATIONS, TABLES


@pytest.fixture
def store(tmp_path: Path) -> Store:
    return Store(tmp_path / "db" / "kb.duckdb", busy_timeout_s=10)


def rollout_rows(count: int, stage: str = "format") -> list[dict]:
    return [
        {"run_id": "r1", "step": i, "problem_id": "L1/19", "sample_index": i % 4, "turn": 0, "stage": stage}
        for i in range(count)
    ]


def table_rows(store: Store, table: str, order_by: str) -> list[tuple]:
    return store.fetchall(f"SELECT * EXCLUDE (created_at) FROM {table} ORDER BY {order_by}")


@pytest.mark.parametrize("count", [3, ARROW_BATCH_MIN_ROWS * 20])  # executemany and arrow paths
def test_upsert_same_batch_twice_gives_same_rows(store: Store, count: int) -> None:
    rows = rollout_rows(count)
    assert store.upsert("rollouts", rows) == count
    first = table_rows(store, "rollouts", "step")
    assert store.upsert("rollouts", rows) == count
    assert table_rows(store, "rollouts", "step") == first
    assert len(first) == count


@pytest.mark.parametrize("count", [2, ARROW_BATCH_MIN_ROWS * 3])
def test_upsert_replaces_given_columns_and_keeps_the_rest(store: Store, count: int) -> None:
    store.upsert("rollouts", [{**r, "prompt_tokens": 7} for r in rollout_rows(count)])
    store.upsert("rollouts", rollout_rows(count, stage="compile"))
    stages = store.fetchall("SELECT DISTINCT stage, prompt_tokens FROM rollouts")
    assert stages == [("compile", 7)]


def test_upsert_sets_updated_at_and_keeps_created_at(store: Store) -> None:
    store.upsert("runs", [{"run_id": "a", "status": "running", "config_json": {"lr": 1e-5}}])
    (created, updated) = store.fetchall("SELECT created_at, updated_at FROM runs")[0]
    store.upsert("runs", [{"run_id": "a", "status": "finished"}])
    row = store.query("SELECT * FROM runs").row(0, named=True)
    assert row["status"] == "finished"
    assert row["config_json"] == '{"lr": 1e-05}'  # dicts become JSON in text columns
    assert row["created_at"] == created
    assert row["updated_at"] > updated


@pytest.mark.parametrize("count", [3, ARROW_BATCH_MIN_ROWS * 2])
def test_repeated_key_within_a_batch_last_wins_for_replace_first_for_ignore(store: Store, count: int) -> None:
    rows = [{"run_id": "a", "status": f"s{i}"} for i in range(count)]
    assert store.upsert("runs", rows) == 1
    assert store.fetchall("SELECT status FROM runs") == [(f"s{count - 1}",)]
    store.insert_ignore("runs", [{"run_id": "b", "status": f"s{i}"} for i in range(count)])
    store.upsert("runs", [{"run_id": "b", "status": "later"}], on_conflict="ignore")
    assert store.fetchall("SELECT status FROM runs WHERE run_id = 'b'") == [("s0",)]


def test_arrow_and_row_paths_store_the_same_values(tmp_path: Path) -> None:
    def rows(n: int) -> list[dict]:
        return [
            {"doc_sha256": f"d{i}", "model_id": "m", "dimension": 3, "vector": [0.5, 1.5, float(i)]}
            for i in range(n)
        ]

    big, small = Store(tmp_path / "big.duckdb"), Store(tmp_path / "small.duckdb")
    count, small_batch = ARROW_BATCH_MIN_ROWS * 2, ARROW_BATCH_MIN_ROWS // 2
    big.upsert("embeddings", rows(count))
    all_rows = rows(count)
    for start in range(0, count, small_batch):
        small.upsert("embeddings", all_rows[start : start + small_batch])
    order = "doc_sha256"
    assert table_rows(big, "embeddings", order) == table_rows(small, "embeddings", order)
    assert table_rows(big, "embeddings", order)[1] == ("d1", "m", 3, [0.5, 1.5, 1.0])


def test_values_arrow_cannot_type_fall_back_to_duckdb_casts(store: Store) -> None:
    rows = [{"run_id": f"r{i}", "created_at": "2024-01-02 03:04:05"} for i in range(ARROW_BATCH_MIN_ROWS * 2)]
    store.upsert("runs", rows)
    assert store.fetchall("SELECT DISTINCT year(created_at) FROM runs") == [(2024,)]


def test_put_text_and_put_kernel_store_each_text_once(store: Store) -> None:
    digest = store.put_text("prompt", "write a kernel")
    assert digest == sha256_text("write a kernel")
    assert store.put_text("prompt", "write a kernel") == digest
    assert store.put_texts("completion", ["a", "b", "a"]) == [sha256_text("a"), sha256_text("b"), sha256_text("a")]
    assert store.count("blobs") == 3
    source = "class ModelNew: pass\n"
    kernel = store.put_kernel(source, "triton")
    assert kernel == EvalRequest("L1/1", source).candidate_sha256
    store.put_kernel(source, "triton")
    assert store.fetchall("SELECT sha256, backend, source FROM kernels") == [(kernel, "triton", source)]


def make_result(request: EvalRequest, **fields) -> EvalResult:
    base = dict(
        problem_id=request.problem_id,
        candidate_sha256=request.candidate_sha256,
        backend="triton",
        precision="fp32",
        device_kind="cpu",
        format_ok=True,
        compiled=True,
        correct=True,
        runtime_ms=1.5,
        baseline_ms=3.0,
        speedup=2.0,
        flags=[Flag.EXCESSIVE_SPEEDUP.value],
        settings_hash=request.verdict_hash,
    )
    base.update(fields)
    return EvalResult(**base)


def test_record_evaluations_round_trip_through_the_cache(store: Store) -> None:
    request = EvalRequest("L1/19", "class ModelNew: pass\n", EvalSettings(precision="fp32"))
    result = make_result(request)
    assert store.get_cached_evaluation(request.cache_key) is None  # no file yet
    assert not store.path.exists()  # ...and looking did not create it

    assert store.record_evaluations([result]) == [request.cache_key]
    assert eval_key_for(result.problem_id, result.candidate_sha256, result.settings_hash) == request.cache_key
    cached = store.get_cached_evaluation(request.cache_key)
    assert cached is not None and cached.cached
    cached.cached = False
    assert cached == result
    row = store.query("SELECT * FROM evaluations").row(0, named=True)
    assert row["flags"] == '["excessive_speedup"]'
    assert row["error_category"] == "ok" and row["speedup"] == 2.0 and row["kernel_sha256"] == request.candidate_sha256

    # A later verdict for the same key replaces the earlier one.
    store.record_evaluations([make_result(request, flags=[Flag.EXCESSIVE_SPEEDUP.value, Flag.REVERIFIED.value])])
    assert store.count("evaluations") == 1
    assert Flag.REVERIFIED.value in store.get_cached_evaluation(request.cache_key).flags


def test_infrastructure_failures_are_not_served_from_the_cache(store: Store) -> None:
    ok = EvalRequest("L1/1", "a")
    infra = EvalRequest("L1/1", "b")
    store.record_evaluations(
        [make_result(ok), EvalResult.failure(infra, ErrorCategory.INFRA, "worker lost"), EvalResult.failure(
            EvalRequest("L1/1", "c"), ErrorCategory.COMPILE, "syntax error")]
    )
    found = store.get_cached_evaluations([ok.cache_key, infra.cache_key, EvalRequest("L1/1", "c").cache_key, "x"])
    assert set(found) == {ok.cache_key, EvalRequest("L1/1", "c").cache_key}
    assert found[EvalRequest("L1/1", "c").cache_key].error_category is ErrorCategory.COMPILE


def test_schema_builds_every_table_and_migrations_rerun_safely(store: Store) -> None:
    assert store.schema_version() == 0
    assert store.migrate() == MIGRATIONS[-1][0]
    store.upsert("runs", [{"run_id": "a"}])
    again = Store(store.path)
    assert again.migrate() == MIGRATIONS[-1][0]
    versions = store.fetchall("SELECT version FROM schema_migrations ORDER BY version")
    assert versions == [(m[0],) for m in MIGRATIONS]
    tables = {r[0] for r in store.fetchall("SELECT table_name FROM information_schema.tables")}
    assert set(TABLES) <= tables
    assert store.count("runs") == 1


EXTRA_MIGRATION = (
    MIGRATIONS[-1][0] + 1,
    "test: a column and a table",
    [
        "ALTER TABLE runs ADD COLUMN note VARCHAR",
        "CREATE TABLE extra_things (thing_id VARCHAR PRIMARY KEY, weight DOUBLE)",
    ],
)


def test_an_older_database_is_brought_forward_on_open(tmp_path: Path) -> None:
    path = tmp_path / "old.duckdb"
    old = Store(path)
    old.upsert("runs", [{"run_id": "kept", "status": "finished"}])
    newer = Store(path, migrations=[*MIGRATIONS, EXTRA_MIGRATION])
    assert newer.schema_version() == MIGRATIONS[-1][0]  # reading does not migrate
    newer.upsert("runs", [{"run_id": "kept", "note": "hello"}])
    newer.upsert("extra_things", [{"thing_id": "t", "weight": 2.0}])
    assert newer.schema_version() == EXTRA_MIGRATION[0]
    assert newer.fetchall("SELECT run_id, status, note FROM runs") == [("kept", "finished", "hello")]
    # The old code refuses a file from the future instead of writing to it blindly.
    with pytest.raises(StoreVersionError, match="schema version"):
        Store(path).upsert("runs", [{"run_id": "x"}])


def test_a_failing_migration_rolls_back_and_is_not_recorded(tmp_path: Path) -> None:
    path = tmp_path / "m.duckdb"
    Store(path).init()
    broken = (MIGRATIONS[-1][0] + 1, "broken", ["CREATE TABLE half_done (a INT)", "SELECT * FROM no_such_table"])
    with pytest.raises(duckdb.Error):
        Store(path, migrations=[*MIGRATIONS, broken]).init()
    store = Store(path)
    assert store.schema_version() == MIGRATIONS[-1][0]
    assert store.fetchall("SELECT count(*) FROM information_schema.tables WHERE table_name = 'half_done'") == [(0,)]


def test_bad_names_raise_one_clear_error(store: Store) -> None:
    with pytest.raises(StoreSchemaError, match=r"no table 'rolouts'; the tables are: .*rollouts"):
        store.upsert("rolouts", rollout_rows(1))
    with pytest.raises(StoreSchemaError, match=r"Table rollouts has no column\(s\) stepp"):
        store.upsert("rollouts", [{**rollout_rows(1)[0], "stepp": 1}])
    with pytest.raises(StoreSchemaError, match=r"lacks key column\(s\) step"):
        store.upsert("rollouts", [{"run_id": "r", "problem_id": "p", "sample_index": 0, "turn": 0}])
    with pytest.raises(ValueError, match="on_conflict"):
        store.upsert("runs", [{"run_id": "a"}], on_conflict="merge")  # type: ignore[arg-type]
    assert store.count("rollouts") == 0


def test_a_failed_batch_writes_nothing(store: Store) -> None:
    rows = rollout_rows(ARROW_BATCH_MIN_ROWS * 2)
    rows[5]["prompt_tokens"] = "not a number"  # arrow refuses; DuckDB's cast fails inside the transaction
    with pytest.raises(duckdb.Error):
        store.upsert("rollouts", rows)
    assert store.count("rollouts") == 0


def test_read_only_never_creates_the_file(tmp_path: Path) -> None:
    store = Store(tmp_path / "missing.duckdb")
    with pytest.raises(StoreMissingError) as info:
        store.query("SELECT 1", read_only=True)
    assert isinstance(info.value, UserError)
    assert store.count("runs") == 0 and store.schema_version() == 0
    assert list(tmp_path.iterdir()) == []


def test_read_only_queries_cannot_write(store: Store) -> None:
    store.init()
    with pytest.raises(duckdb.Error, match="read-only"):
        store.query("CREATE TABLE t (a INT)", read_only=True)
    assert store.query("SELECT count(*) AS n FROM runs", read_only=True)["n"].to_list() == [0]


def test_query_accepts_positional_and_named_parameters(store: Store) -> None:
    store.upsert("runs", [{"run_id": "a", "level": 1}, {"run_id": "b", "level": 2}])
    assert store.query("SELECT run_id FROM runs WHERE level = ?", [2])["run_id"].to_list() == ["b"]
    assert store.query("SELECT run_id FROM runs WHERE level = $lvl", {"lvl": 1}, read_only=True)["run_id"].to_list() == ["a"]
    assert store.query("CREATE TABLE scratch (a INT)").is_empty()


def test_nested_calls_reuse_the_open_connection(store: Store) -> None:
    with store.connect() as con:
        con.execute("INSERT INTO runs (run_id) VALUES ('outer')")
        store.upsert("runs", [{"run_id": "inner"}])
        assert store.count("runs") == 2
    with store.connect(read_only=True):
        with pytest.raises(RuntimeError, match="read-only"):
            store.upsert("runs", [{"run_id": "x"}])


def test_threads_sharing_a_store_all_write(store: Store) -> None:
    errors: list[BaseException] = []

    def write(thread: int) -> None:
        try:
            for batch in range(5):
                store.upsert("rollouts", [{**r, "run_id": f"t{thread}", "step": batch * 5 + i}
                                          for i, r in enumerate(rollout_rows(5))])
                store.query("SELECT count(*) FROM rollouts", read_only=batch % 2 == 0)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(t,)) for t in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert store.fetchall("SELECT run_id, count(*) FROM rollouts GROUP BY 1 ORDER BY 1") == [
        (f"t{t}", 25) for t in range(3)
    ]


def test_default_path_follows_kbrl_db(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("KBRL_DB", str(tmp_path / "env.duckdb"))
    assert Store().path == tmp_path / "env.duckdb" == default_db_path()
    monkeypatch.delenv("KBRL_DB")
    assert Store().path == Path("runs/kernelbench_rl.duckdb")


@pytest.mark.parametrize("count", [2, ARROW_BATCH_MIN_ROWS * 2])
def test_numpy_values_are_stored_as_plain_numbers(store: Store, count: int) -> None:
    np = pytest.importorskip("numpy")
    store.upsert("train_steps", [{"run_id": "r", "step": np.int64(s), "loss": np.float32(0.5)} for s in range(count)])
    store.upsert("embeddings", [{"doc_sha256": "d", "model_id": "m", "vector": np.arange(3, dtype=np.float32)}])
    assert store.fetchall("SELECT DISTINCT loss FROM train_steps") == [(0.5,)]
    assert store.fetchall("SELECT vector FROM embeddings") == [([0.0, 1.0, 2.0],)]


def test_write_batch_replaces_a_partition_atomically_across_tables(tmp_path):
    """A re-done step with fewer turns leaves none of the earlier attempt's extra rows behind."""
    store = Store(tmp_path / "db.duckdb")
    key = {"run_id": "r", "step": 3, "problem_id": "L1/19", "sample_index": 0}
    first = [{**key, "turn": t, "stage": "format"} for t in range(4)]
    store.write_batch({"rollouts": first, "rewards": [{**key, "turn": t, "reward": 0.0} for t in range(4)]},
                      replace_where={"run_id": "r", "step": 3, "problem_id": "L1/19"})
    other = {**key, "step": 4, "turn": 0}
    store.upsert("rollouts", [other])
    redo = [{**key, "turn": t, "stage": "compile"} for t in range(2)]
    store.write_batch({"rollouts": redo, "rewards": [{**key, "turn": t, "reward": 1.0} for t in range(2)]},
                      replace_where={"run_id": "r", "step": 3, "problem_id": "L1/19"})
    assert store.fetchall("SELECT turn, stage FROM rollouts WHERE step = 3 ORDER BY turn") == [(0, "compile"), (1, "compile")]
    assert store.fetchall("SELECT count(*) FROM rewards WHERE step = 3")[0][0] == 2
    assert store.fetchall("SELECT count(*) FROM rollouts WHERE step = 4")[0][0] == 1  # other partitions untouched

    # a bad row anywhere rolls the whole batch back, the deletes included
    with pytest.raises(Exception):
        store.write_batch({"rollouts": redo, "rewards": [{**key, "turn": 0, "no_such_column": 1}]},
                          replace_where={"run_id": "r", "step": 3, "problem_id": "L1/19"})
    assert store.fetchall("SELECT count(*) FROM rollouts WHERE step = 3")[0][0] == 2


def test_migration_2_adds_rollout_verdict_columns(tmp_path):
    store = Store(tmp_path / "db.duckdb")
    store.upsert("rollouts", [{"run_id": "r", "step": 0, "problem_id": "L1/1", "sample_index": 0, "turn": 0,
                               "format_ok": False, "error_category": "format", "error_message": "no code block"}])
    assert store.schema_version() >= 2
    assert store.fetchall("SELECT error_category FROM rollouts")[0][0] == "format"
