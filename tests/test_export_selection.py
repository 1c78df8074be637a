"""Which rows `kernelbench-rl export` selects and what each says, from rows written straight into a DuckDB file (no
evaluator, no subprocess): every filter alone (run, level, stage, suite, problem in any id form, correct only), the
holdout split (a row's own word, else its run's configured split, else the default one), a run that is not there,
the columns a row takes from its problem when the rollout lacks them, and the command's refusals and summary line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelbench_rl.errors import UserError
from kernelbench_rl.evaluation.result import EVALUATOR_VERSION, ErrorCategory, EvalResult
from kernelbench_rl.problems import get_problem
from kernelbench_rl.store import Store
from kernelbench_rl.store.schema import MIGRATIONS
from kernelbench_rl.trajectories import TrajectoryFilter, trajectory_rows

# (run, step, problem_id, sample, level, suite, stage, correct); L1/24 and L10/5 are held out by the default split
ROWS = [
    ("a", 0, "L1/19", 0, 1, "kernelbench", "format", True),
    ("a", 0, "L1/19", 1, 1, "kernelbench", "format", False),
    ("a", 1, "L2/1", 0, 2, "kernelbench", "speed", True),
    ("a", 1, "L5/1", 0, 5, "kernrl", "speed", False),
    ("a", 2, "L1/24", 0, 1, "kernelbench", "speed", True),
    ("b", 0, "L1/21", 0, 1, None, "compile", True),  # written before suites were recorded
    ("b", 0, "L10/5", 0, 10, None, "compile", True),
]


def verdict(index: int, problem_id: str, correct: bool, **extra) -> EvalResult:
    return EvalResult(problem_id, f"{index:064x}", "triton", "fp32", "cuda", format_ok=True, compiled=True,
                      correct=correct, speedup=2.0 if correct else None, hardware="H200",
                      error_category=ErrorCategory.OK if correct else ErrorCategory.MISMATCH, settings_hash="s",
                      **extra)


def write(store: Store, rows=ROWS, *, configs: dict[str, dict] | None = None, components: dict | None = None) -> None:
    results = [verdict(i, row[2], row[7]) for i, row in enumerate(rows)]
    keys = store.record_evaluations(results)
    store.upsert("runs", [{"run_id": run, "kind": "train", "config_json": json.dumps(config)}
                          for run, config in (configs or {}).items()])
    store.upsert("rollouts", [
        {"run_id": run, "step": step, "problem_id": pid, "sample_index": sample, "turn": 0, "level": level,
         "suite": suite, "stage": stage, "eval_key": key, "format_ok": True, "error_category": "ok"}
        for (run, step, pid, sample, level, suite, stage, _), key in zip(rows, keys)])
    store.upsert("rewards", [
        {"run_id": run, "step": step, "problem_id": pid, "sample_index": sample, "turn": 0, "stage": stage,
         "reward": 1.0, "components_json": json.dumps((components or {}).get((run, pid), {}))}
        for run, step, pid, sample, _, _, stage, _ in rows])


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    store = Store(tmp_path_factory.mktemp("select") / "kb.duckdb")
    write(store)
    return store


def picked(store: Store, **wanted) -> list[tuple[str, int, str, int]]:
    rows = trajectory_rows(store, TrajectoryFilter(include_holdout=wanted.pop("include_holdout", True), **wanted)).rows
    return [(row["run_id"], row["step"], row["problem_id"], row["sample_index"]) for row in rows]


def keys(*indexes: int) -> list[tuple[str, int, str, int]]:
    return [(ROWS[i][0], ROWS[i][1], ROWS[i][2], ROWS[i][3]) for i in indexes]


# -- each filter alone -------------------------------------------------------------------------------------------
def test_with_no_filter_every_row_comes_in_order(store):
    assert picked(store) == keys(*range(len(ROWS)))


@pytest.mark.parametrize("wanted, expected", [
    ({"run_ids": ["b"]}, [5, 6]),
    ({"run_ids": ["a", "b"]}, [0, 1, 2, 3, 4, 5, 6]),
    ({"levels": [1]}, [0, 1, 4, 5]),
    ({"levels": [2, 10]}, [2, 6]),
    ({"stage": "speed"}, [2, 3, 4]),
    ({"stage": "compile"}, [5, 6]),
    ({"suite": "kernrl"}, [3, 6]),  # L10/5's suite from its problem, the row has none
    ({"suite": "kernelbench"}, [0, 1, 2, 4, 5]),
    ({"correct_only": True}, [0, 2, 4, 5, 6]),
    ({"problems": ["L1/19"]}, [0, 1]),
    ({"problems": ["L10_5_ChaCha20"]}, [6]),  # kernrl's form
    ({"problems": ["L10_5", "L2/1"]}, [2, 6]),
    ({"problems": ["L1_19"]}, []),  # kernrl's form names kernrl's problems only
    ({"run_ids": ["a"], "levels": [1], "correct_only": True}, [0, 4]),
])
def test_each_filter_keeps_exactly_its_rows(store, wanted, expected):
    assert picked(store, **wanted) == keys(*expected)


def test_a_problem_filter_in_kernrls_form_never_takes_kernelbenchs_problem_of_that_number(tmp_path):
    store = Store(tmp_path / "kb.duckdb")
    write(store, [("a", 0, "L1/19", 0, 1, "kernelbench", "speed", True)])
    assert picked(store, problems=["L1_19_ReLU"]) == [] and picked(store, problems=["L1_19"]) == []
    assert picked(store, problems=["L1/19"]) == keys(0)


# -- holdout ------------------------------------------------------------------------------------------------------
def test_holdout_problems_are_left_out_and_counted_unless_asked_for(store):
    export = trajectory_rows(store, TrajectoryFilter())
    assert [(r["problem_id"], r["holdout"]) for r in export.rows] == [
        ("L1/19", False), ("L1/19", False), ("L2/1", False), ("L5/1", False), ("L1/21", False)]
    assert dict(export.left_out) == {"holdout": 2}
    included = trajectory_rows(store, TrajectoryFilter(include_holdout=True)).rows
    assert [r["holdout"] for r in included] == [False, False, False, False, True, False, True]


def test_a_rows_own_word_on_holdout_comes_before_the_split(tmp_path):
    store = Store(tmp_path / "kb.duckdb")
    rows = [("a", 0, "L1/19", 0, 1, "kernelbench", "speed", True), ("a", 0, "L1/24", 0, 1, "kernelbench", "speed", True)]
    write(store, rows, components={("a", "L1/19"): {"holdout": True}, ("a", "L1/24"): {"holdout": False}})
    export = trajectory_rows(store, TrajectoryFilter())
    assert [r["problem_id"] for r in export.rows] == ["L1/24"] and dict(export.left_out) == {"holdout": 1}


def test_the_split_is_the_runs_configured_one(tmp_path):
    """L1/20 is held out at a fraction of 0.5 (seed 0), L1/48 with seed 7 (fraction 0.2), L1/24 by the defaults."""
    store = Store(tmp_path / "kb.duckdb")
    rows = [(run, 0, pid, 0, 1, "kernelbench", "speed", True)
            for run in ("half", "seven", "plain", "bad") for pid in ("L1/20", "L1/48", "L1/24")]
    write(store, rows, configs={"half": {"problems": {"holdout_fraction": 0.5}},
                                "seven": {"problems": {"split_seed": 7}},
                                "plain": {"run_id": "plain"}})
    store.upsert("runs", [{"run_id": "bad", "kind": "train", "config_json": "{not json"}])
    held = {(r["run_id"], r["problem_id"]) for r in trajectory_rows(store, TrajectoryFilter(include_holdout=True)).rows
            if r["holdout"]}
    assert held == {("half", "L1/20"), ("half", "L1/24"), ("seven", "L1/48"), ("plain", "L1/24"), ("bad", "L1/24")}


def test_a_runs_problem_source_missing_here_falls_back_to_the_one_given(tmp_path):
    store = Store(tmp_path / "kb.duckdb")
    write(store, [("a", 0, "L1/24", 0, 1, None, "speed", True)],
          configs={"a": {"problems": {"root": str(tmp_path / "gone"), "holdout_fraction": 0.2}}})
    [row] = trajectory_rows(store, TrajectoryFilter(include_holdout=True)).rows
    assert row["holdout"] is True and row["suite"] == "kernelbench" and row["problem_name"] == "24_LogSoftmax"


# -- runs that are not there ---------------------------------------------------------------------------------------
def test_a_run_with_no_rollouts_is_a_user_error_naming_it_unless_other_filters_narrowed_it(store):
    with pytest.raises(UserError, match=r"^No rollouts of run c in .*SELECT DISTINCT run_id FROM rollouts"):
        trajectory_rows(store, TrajectoryFilter(run_ids=["a", "c"]))
    for narrowed in ({"levels": [9]}, {"stage": "nothing"}, {"correct_only": True}):
        assert trajectory_rows(store, TrajectoryFilter(run_ids=["c"], **narrowed)).rows == []


def test_no_database_is_a_user_error_and_creates_none(tmp_path):
    with pytest.raises(UserError, match="There is no database at"):
        trajectory_rows(Store(tmp_path / "none.duckdb"), TrajectoryFilter())
    assert not (tmp_path / "none.duckdb").exists()


def test_a_database_from_before_suites_is_migrated_and_exported(tmp_path):
    path = tmp_path / "old.duckdb"
    old = Store(path, migrations=[m for m in MIGRATIONS if m[0] < 14])
    old.upsert("rollouts", [{"run_id": "a", "step": 0, "problem_id": "L10/5", "sample_index": 0, "turn": 0,
                             "level": 10, "stage": "speed"}])
    [row] = trajectory_rows(Store(path), TrajectoryFilter(include_holdout=True)).rows
    assert (row["suite"], row["problem"]) == ("kernrl", "L10_5_ChaCha20")


# -- a row's columns -----------------------------------------------------------------------------------------------
def test_a_row_takes_its_problems_names_and_level_and_the_evaluators_record(tmp_path):
    store = Store(tmp_path / "kb.duckdb")
    result = verdict(0, "L10/5", True, versions={"suite": "kernrl", "torch": "9.9"})
    [key] = store.record_evaluations([result])
    store.upsert("rollouts", [{"run_id": "a", "step": 0, "problem_id": "L10/5", "sample_index": 0, "turn": 0,
                               "level": None, "suite": "kernrl", "stage": "speed", "eval_key": key},
                              {"run_id": "a", "step": 0, "problem_id": "L1/19", "sample_index": 0, "turn": 0,
                               "level": None, "suite": None, "stage": "format", "eval_key": None}])
    plain, kernrl = trajectory_rows(store, TrajectoryFilter(include_holdout=True)).rows  # in problem_id order
    problem = get_problem("L10/5")
    assert (kernrl["problem"], kernrl["problem_id"], kernrl["level"], kernrl["problem_name"]) == (
        "L10_5_ChaCha20", "L10/5", 10, problem.name)
    assert kernrl["reference"] == problem.source and kernrl["backend"] == "triton"
    assert (kernrl["correct"], kernrl["speedup"], kernrl["hardware"]) == (True, 2.0, "H200")
    assert kernrl["versions"] == json.dumps({"evaluator": EVALUATOR_VERSION, "suite": "kernrl", "torch": "9.9"})
    # no evaluation at all (a format failure): nothing correct, no speedup, the evaluator's version still told
    assert (plain["level"], plain["suite"], plain["correct"], plain["speedup"], plain["backend"]) == (
        1, "kernelbench", None, None, None)
    assert json.loads(plain["versions"]) == {"evaluator": EVALUATOR_VERSION}


def test_a_verdict_the_evaluator_cannot_read_back_publishes_no_speedup(tmp_path):
    store = Store(tmp_path / "kb.duckdb")
    write(store, [("a", 0, "L1/19", 0, 1, "kernelbench", "speed", True)])
    store.fetchall("UPDATE evaluations SET result_json = '{\"problem_id\": 3}'")
    store.fetchall("UPDATE rewards SET components_json = '[1, 2]'")  # no object: read as none
    [row] = trajectory_rows(store, TrajectoryFilter()).rows
    assert row["speedup"] is None and row["correct"] is True and row["holdout"] is False


# -- the command ---------------------------------------------------------------------------------------------------
def _cli(*args: str):
    from kernelbench_rl.cli import app

    return CliRunner().invoke(app, ["export", *args])


@pytest.mark.parametrize("args, said", [
    (["--format", "csv"], "--format must be one of datasets, parquet, not 'csv'."),
    (["--suite", "other"], "--suite must be kernelbench or kernrl, not 'other'."),
])
def test_a_bad_format_or_suite_is_refused_before_anything_is_read(store, tmp_path, args, said):
    done = _cli("--db", str(tmp_path / "none.duckdb"), "--out", str(tmp_path / "out"), *args)
    assert isinstance(done.exception, UserError) and str(done.exception) == said
    assert not (tmp_path / "out").exists()


def test_nothing_to_export_names_the_filter_and_what_was_left_out(store, tmp_path):
    done = _cli("--db", str(store.path), "--out", str(tmp_path / "out"), "--level", "10")
    assert isinstance(done.exception, UserError)
    assert str(done.exception) == (f"No rollouts in {store.path} match (every run; levels 10; holdout problems left "
                                   "out; left out: holdout 1); nothing was written.")
    done = _cli("--db", str(store.path), "--out", str(tmp_path / "out"), "--level", "9")
    assert str(done.exception) == (f"No rollouts in {store.path} match (every run; levels 9; holdout problems left "
                                   "out); nothing was written.")
    assert not (tmp_path / "out").exists()


def test_the_command_says_what_it_wrote_and_what_it_left_out(store, tmp_path):
    out = tmp_path / "out"
    done = _cli("--db", str(store.path), "--out", str(out), "--format", "parquet", "--suite", "kernelbench",
                "--stage", "speed", "--run-id", "a", "--problem", "L2/1", "--problem", "L1/24")
    assert done.exit_code == 0, done.output
    assert done.output.strip().endswith(
        f"wrote 1 rows (1 correct) to {out} as parquet, with README.md; left out: holdout 1")
    done = _cli("--db", str(store.path), "--out", str(tmp_path / "all"), "--include-holdout", "--correct-only")
    assert done.output.strip().endswith("wrote 5 rows (5 correct) to " + str(tmp_path / "all")
                                        + " as datasets, with README.md; left out: nothing")


def three_problem_root(tmp_path):
    """A KernelBench-laid-out root holding only L1/19, L1/21 and L1/22 (copied from the bundled set)."""
    from kernelbench_rl.problems.loaders import BUNDLED_ROOT

    root = tmp_path / "KernelBench"
    (root / "level1").mkdir(parents=True)
    for name in ("19_ReLU.py", "21_Sigmoid.py", "22_Tanh.py"):
        (root / "level1" / name).write_text((BUNDLED_ROOT / "level1" / name).read_text())
    return root


def test_an_export_never_writes_over_a_folder_unless_asked_and_its_card_names_the_database(store, tmp_path):
    out = tmp_path / "out"
    first = _cli("--db", str(store.path), "--out", str(out), "--run-id", "b")
    assert first.exit_code == 0, first.output
    assert f"from `{store.path}`" in (out / "README.md").read_text()
    again = _cli("--db", str(store.path), "--out", str(out), "--run-id", "a")
    assert isinstance(again.exception, UserError)
    assert str(again.exception) == f"{out} already exists and is not empty; choose another --out or pass --overwrite."
    replaced = _cli("--db", str(store.path), "--out", str(out), "--run-id", "a", "--overwrite")
    assert replaced.exit_code == 0, replaced.output
    assert "wrote 4 rows (2 correct)" in replaced.output  # run a without its holdout row, two of them correct


def test_an_export_folder_under_a_file_is_refused_naming_it(store, tmp_path):
    (tmp_path / "plain").write_text("a file")
    done = _cli("--db", str(store.path), "--out", str(tmp_path / "plain" / "out"))
    assert str(done.exception).startswith(f"Could not write the export folder {tmp_path / 'plain' / 'out'}: ")


def test_the_problems_root_given_is_where_rows_find_their_problem_and_split(store, tmp_path):
    """A root holding only L1/19, L1/21 and L1/22: L1/24 is no problem of it (no name, no reference), and the split
    is its own (of the two level-1 problems that can be held out, L1/19 being the prompt's example, one is)."""
    from kernelbench_rl.problems import holdout_ids, load_problems
    root = three_problem_root(tmp_path)
    [held] = holdout_ids(load_problems(str(root)), 0.2, 0)
    out = tmp_path / "out"
    done = _cli("--db", str(store.path), "--out", str(out), "--format", "parquet", "--include-holdout", "--level", "1",
                "--problems-root", str(root))
    assert done.exit_code == 0, done.output
    from kernelbench_rl.trajectories import read_trajectories

    rows = {(row["problem_id"], row["sample_index"]): row for row in read_trajectories(out)}
    assert rows[("L1/24", 0)]["problem_name"] is None and rows[("L1/24", 0)]["holdout"] is False
    assert held in ("L1/21", "L1/22")
    assert {pid: rows[(pid, 0)]["holdout"] for pid in ("L1/19", "L1/21")} == {"L1/19": False, "L1/21": held == "L1/21"}
    assert rows[("L1/19", 0)]["problem_name"] == "19_ReLU"


@pytest.mark.parametrize("key", ["root", "kernelbench_root"])
def test_a_runs_own_problem_source_gives_its_problems_and_split(tmp_path, key):
    """The run's configured source (its `problems.root`, or `problems.kernelbench_root` of older configs), where this
    machine has it: L1/21 is held out among L1/19, L1/21 and L1/22, and L1/24 is no problem of it."""
    root = three_problem_root(tmp_path)
    store = Store(tmp_path / "kb.duckdb")
    write(store, [("a", 0, pid, 0, 1, "kernelbench", "speed", True) for pid in ("L1/21", "L1/22", "L1/24")],
          configs={"a": {"problems": {key: str(root)}}})
    rows = {r["problem_id"]: r for r in trajectory_rows(store, TrajectoryFilter(include_holdout=True)).rows}
    assert {pid: row["holdout"] for pid, row in rows.items()} == {"L1/21": True, "L1/22": False, "L1/24": False}
    assert rows["L1/22"]["problem_name"] == "22_Tanh" and rows["L1/24"]["problem_name"] is None


def test_a_problem_filter_finds_a_row_whose_problem_is_not_here_by_its_level_and_number_in_its_own_suite(tmp_path):
    """Rows whose problem this machine's source lacks (KernelBench's L1/999, kernrl's L10/999, L2/999 written before
    suites were recorded) are still found by an id in any form naming their level and number, kernrl's form naming
    kernrl's rows only; another level or number, or an id longer than any, names none of them."""
    store = Store(tmp_path / "kb.duckdb")
    write(store, [("a", 0, "L1/999", 0, 1, "kernelbench", "speed", True),
                  ("a", 0, "L10/999", 0, 10, "kernrl", "speed", True),
                  ("a", 0, "L2/999", 0, 2, None, "speed", True)])
    assert picked(store, problems=["L1/999"]) == [("a", 0, "L1/999", 0)]
    assert picked(store, problems=["L10/999"]) == picked(store, problems=["L10_999"]) == [("a", 0, "L10/999", 0)]
    assert picked(store, problems=["L2/999"]) == [("a", 0, "L2/999", 0)]
    assert picked(store, problems=["L1_999"]) == picked(store, problems=["L2_999"]) == []  # not kernrl's
    assert picked(store, problems=["L1/998", "L999/1", "L9/999", "L999/999"]) == []
    assert picked(store, problems=["L" + "1" * 200]) == []


def test_kernrls_suite_and_a_limit_of_one_are_taken(store, tmp_path):
    out = tmp_path / "out"
    done = _cli("--db", str(store.path), "--out", str(out), "--suite", "kernrl", "--include-holdout", "--limit", "1")
    assert done.exit_code == 0, done.output
    assert done.output.strip().endswith(
        f"wrote 1 rows (0 correct) to {out} as datasets, with README.md; left out: over_limit 1")


def test_the_command_called_as_a_function_has_the_clis_defaults(store, tmp_path, capsys):
    """Every row but the holdout ones, correct or not, as a datasets folder, never over an existing one."""
    from kernelbench_rl.commands.export import export_command
    from kernelbench_rl.trajectories import read_trajectories

    out = tmp_path / "out"
    export_command(out=out, db=store.path)
    assert capsys.readouterr().out.strip() == (
        f"wrote 5 rows (3 correct) to {out} as datasets, with README.md; left out: holdout 2")
    assert (out / "state.json").exists() and len(read_trajectories(out)) == 5
    with pytest.raises(UserError, match="already exists and is not empty"):
        export_command(out=out, db=store.path)


@pytest.mark.parametrize("args, summary", [
    (["--problem", "L1/19"], "wrote 2 rows (1 correct) to {out} as datasets, with README.md; left out: nothing"),
    (["--suite", "kernrl"], "wrote 1 rows (0 correct) to {out} as datasets, with README.md; left out: holdout 1"),
    (["--stage", "compile"], "wrote 1 rows (1 correct) to {out} as datasets, with README.md; left out: holdout 1"),
    (["--limit", "2"], "wrote 2 rows (1 correct) to {out} as datasets, with README.md; left out: holdout 2, over_limit 3"),
])
def test_each_of_the_commands_filters_or_its_limit_alone_narrows_what_it_writes_and_says_so(store, tmp_path, args, summary):
    out = tmp_path / "out"
    done = _cli("--db", str(store.path), "--out", str(out), *args)
    assert done.exit_code == 0, done.output
    assert done.output.strip().endswith(summary.format(out=out))


def test_a_verdict_stored_without_its_record_keeps_its_correctness_and_publishes_no_speedup(tmp_path):
    """An evaluations row with no result_json (nothing to read the flags from): its correct column is published as
    it is, its speedup is not (no verdict to say it counts)."""
    store = Store(tmp_path / "kb.duckdb")
    write(store, [("a", 0, "L1/19", 0, 1, "kernelbench", "speed", True), ("a", 0, "L1/19", 1, 1, "kernelbench", "speed",
                                                                          False)])
    store.fetchall("UPDATE evaluations SET result_json = NULL")
    rows = trajectory_rows(store, TrajectoryFilter()).rows
    assert [(row["correct"], row["speedup"], row["backend"]) for row in rows] == [(True, None, None), (False, None, None)]


def test_a_row_whose_problem_is_not_here_keeps_what_it_recorded_and_no_more(tmp_path):
    """L1/999 and L3/999 are no problems of the source: a row's own level is published (None where it recorded
    none), its problem in our id form, with no name or reference."""
    store = Store(tmp_path / "kb.duckdb")
    write(store, [("a", 0, "L1/999", 0, 1, "kernelbench", "speed", True),
                  ("a", 0, "L3/999", 0, None, "kernelbench", "speed", True)])
    rows = trajectory_rows(store, TrajectoryFilter()).rows
    assert [(r["problem"], r["level"], r["problem_name"], r["reference"]) for r in rows] == [
        ("L1/999", 1, None, None), ("L3/999", None, None, None)]


def test_a_verdict_record_that_is_no_object_is_published_as_none(tmp_path):
    """A result_json that parses but is no object (a list): no speedup, the correct column as stored, and the
    versions only the evaluator's."""
    store = Store(tmp_path / "kb.duckdb")
    write(store, [("a", 0, "L1/19", 0, 1, "kernelbench", "speed", True)])
    store.fetchall("UPDATE evaluations SET result_json = '[1, 2]'")
    [row] = trajectory_rows(store, TrajectoryFilter()).rows
    assert (row["correct"], row["speedup"], json.loads(row["versions"])) == (True, None, {"evaluator": EVALUATOR_VERSION})


def test_a_runs_problem_source_missing_here_falls_back_to_the_root_given_not_the_bundled_set(tmp_path):
    """The run's configured source is gone; the root given (only L1/19, L1/21, L1/22) is where its rows find their
    problems: L1/24 is none of them (no name), though the bundled set has it."""
    root = three_problem_root(tmp_path)
    store = Store(tmp_path / "kb.duckdb")
    write(store, [("a", 0, pid, 0, 1, "kernelbench", "speed", True) for pid in ("L1/22", "L1/24")],
          configs={"a": {"problems": {"root": str(tmp_path / "gone")}}})
    rows = trajectory_rows(store, TrajectoryFilter(include_holdout=True), problems_root=str(root)).rows
    assert {r["problem_id"]: r["problem_name"] for r in rows} == {"L1/22": "22_Tanh", "L1/24": None}


def test_a_run_with_no_rollouts_is_told_in_one_whole_sentence(store):
    with pytest.raises(UserError) as caught:
        trajectory_rows(store, TrajectoryFilter(run_ids=["c"]))
    assert str(caught.value) == (f"No rollouts of run c in {store.path}; `kernelbench-rl sql \"SELECT DISTINCT run_id "
                                 "FROM rollouts\"` lists the runs.")


def test_a_kernrl_row_never_takes_kernelbenchs_problem_of_the_same_id(tmp_path):
    """kernrl's L1/19 exported where only KernelBench's L1/19 is at hand (the bundled set): another problem, so the
    row publishes no name or reference rather than KernelBench's."""
    store = Store(tmp_path / "kb.duckdb")
    write(store, [("a", 0, "L1/19", 0, 1, "kernrl", "speed", True), ("a", 0, "L1/19", 1, 1, "kernelbench", "speed", True)])
    rows = trajectory_rows(store, TrajectoryFilter()).rows
    assert [(r["suite"], r["problem_name"], r["reference"] is None) for r in rows] == [
        ("kernrl", None, True), ("kernelbench", "19_ReLU", False)]
