"""Faults that must become clean results, with real processes, real signals, a real DuckDB file and a real Prefect
server: a run killed outright is found `crashed` by the next command (and Crashed in Prefect), a run whose database
went read-only says how it ended once it can, Ctrl-C at any moment of a command is one line and 130, the pipeline's
problems follow --levels, and KBRL_MIN_FREE_MB is read by every writer and refused when it is not a number."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelbench_rl.errors import ExitCode
from kernelbench_rl.store import Store
from prefect_session import shared_prefect_api

try:
    from tests.proc_tree import descendants, still_alive_after
except ImportError:  # pragma: no cover - run from tests/
    from proc_tree import descendants, still_alive_after

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
ENV.pop("PREFECT_API_URL", None)  # a command finds the API a run reported to in the run's row, not in its env
# Two level-1 problems, the tiny local policy, no retrieval, the CPU evaluator, short answers, a checkpoint per step.
SHORT = ["policy.backend=local", "policy.base_model=local:tiny", "policy.lora_rank=4", "problems.levels=[1]",
         "problems.ids=[L1/19,L1/21]", "rag.enabled=false", "eval.device=cpu", "sft.enabled=false",
         "training.batch_problems=2", "sampling.group_size=2", "sampling.max_tokens=8", "rewards.truncated=keep",
         "training.checkpoint_every=1", "training.max_steps_off_policy=0"]
HANG_S = 900  # a bound for a hang, not a timing


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    with shared_prefect_api() as url:
        yield url


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelbench_rl.cli", *args]


def _as_a_foreground_job() -> None:
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(args: list[str], cwd: Path = REPO, env: dict | None = None) -> subprocess.Popen:
    return subprocess.Popen(args, cwd=cwd, env=env or ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, preexec_fn=_as_a_foreground_job)


class Output:
    """A process's output, read on a thread."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=lambda: self.lines.extend(proc.stdout), daemon=True)
        self._thread.start()

    def text(self) -> str:
        self._thread.join(timeout=30)
        return "".join(self.lines)


def _rows(db: Path, sql: str) -> list[tuple]:
    try:
        return Store(db, busy_timeout_s=1).fetchall(sql, read_only=True)
    except Exception:  # noqa: BLE001 - not there yet, or held for a moment
        return []


def _wait_until(proc: subprocess.Popen, out: Output, ready) -> None:
    deadline = time.monotonic() + HANG_S
    while not ready():
        assert proc.poll() is None and time.monotonic() < deadline, "".join(out.lines)[-3000:]
        time.sleep(0.5)


def _stop_group(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


def _sql(db: Path, query: str) -> list[dict]:
    """`kernelbench-rl sql --json`: the next command that opens the store."""
    done = subprocess.run(_cli("sql", "--db", str(db), query, "--json"), cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=HANG_S)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _ending(db: Path, run_id: str) -> dict:
    """The run's row as the next command (`sql`) reads it: status first (every schema has it), then how it ended."""
    (row,) = _sql(db, f"SELECT * FROM runs WHERE run_id = '{run_id}'")
    return {"status": row["status"], "exit_code": row.get("exit_code"), "ended": row.get("ended_at") is not None,
            "end_reason": row.get("end_reason") or ""}


# -- 1. a run that died without a word --------------------------------------------------------------------------------
def test_a_killed_train_is_found_crashed_by_the_next_command_and_the_rerun_resumes(tmp_path: Path) -> None:
    """SIGKILL mid-run (as the OOM killer does): before, its row said `running` for ever. The next command that opens
    the store (here `sql`) marks it crashed, with when it was found and how (whose process, found by which command);
    the same command resumes after the last checkpoint, its steps each stored once."""
    db, logs = tmp_path / "kb.duckdb", tmp_path / "logs"
    train = _cli("train", "--no-progress", "run_id=k", f"db_path={db}", f"log_dir={logs}", *SHORT, "training.steps=40")
    proc = _start(train)
    out = Output(proc)
    try:
        _wait_until(proc, out, lambda: len(_rows(db, "SELECT step FROM train_steps")) >= 2)
        children = descendants(proc.pid)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        assert not still_alive_after(children, 30), "a process of the killed run was left"
    finally:
        _stop_group(proc)
    row = _ending(db, "k")
    assert (row["status"], row["exit_code"], row["ended"]) == ("crashed", None, True), row
    assert f"process {proc.pid} on " in row["end_reason"] and "found by `kernelbench-rl sql`" in row["end_reason"]
    before = sorted(step for (step,) in _rows(db, "SELECT step FROM train_steps"))

    again = subprocess.run([*train, "--stop-after", "1"], cwd=REPO, env=ENV, capture_output=True, text=True,
                           timeout=HANG_S)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "resuming run k (crashed, last step" in again.stdout
    steps = [step for (step,) in _rows(db, "SELECT step FROM train_steps ORDER BY step")]
    assert steps == list(range(len(steps))) and len(steps) in (len(before), len(before) + 1), (before, steps)
    row = _ending(db, "k")
    assert (row["status"], row["exit_code"], row["ended"]) == ("stopped", 0, True), row


def _flow_runs(api_url: str, db: Path) -> list:
    """The flow runs this test's pipeline made on the shared server (told apart by their db_path), subflows included."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterParentFlowRunId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        with get_client(sync_client=True) as client:
            roots = [run for run in client.read_flow_runs(limit=200)
                     if run.parameters.get("db_path") in (str(db), str(db.resolve()))]
            found, frontier = list(roots), [run.id for run in roots]
            while frontier:
                children = client.read_flow_runs(
                    flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=frontier)))
                frontier = [run.id for run in children]
                found += children
            return found


def _task_runs(api_url: str, flow_run_ids: list) -> list:
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        with get_client(sync_client=True) as client:
            return client.read_task_runs(flow_run_filter=FlowRunFilter(id=FlowRunFilterId(any_=flow_run_ids)))


def test_a_killed_pipeline_is_crashed_in_the_store_and_in_prefect(prefect_api: str, tmp_path: Path) -> None:
    """The pipeline reports to a Prefect server and is killed mid-training: before, its row said `running` and its
    flow runs `Running` for ever. `sql` finds the crash, and through the API the run reported to, its flow runs
    (the pipeline's and its curriculum subflow's) and their unfinished task runs end Crashed with the same words:
    `sql` and the UI agree."""
    db = tmp_path / "kb.duckdb"
    proc = _start(_cli("pipeline", "--run-id", "pk", "--db-path", str(db), "--log-dir", str(tmp_path / "logs"),
                       "--no-index", "--train-steps", "30", "sft.enabled=false", "sampling.max_tokens=16"),
                  cwd=tmp_path, env={**ENV, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_API_URL": prefect_api})
    out = Output(proc)
    try:
        _wait_until(proc, out, lambda: len(_rows(db, "SELECT step FROM train_steps")) >= 1)
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    finally:
        _stop_group(proc)
    running = [(run.name, run.state.type.value) for run in _flow_runs(prefect_api, db)]
    assert "RUNNING" in {state for _, state in running}, running  # what the kill left, before anyone looked

    row = _ending(db, "pk")
    assert (row["status"], row["ended"]) == ("crashed", True), row
    assert "found by `kernelbench-rl sql`" in row["end_reason"]
    runs = _flow_runs(prefect_api, db)
    states = [(run.name, run.state.type.value) for run in runs]
    # The pipeline's flow run and its curriculum subflow's, Crashed; ingest-corpus had finished before the kill.
    crashed = [run for run in runs if run.state.type.value == "CRASHED"]
    assert len(crashed) >= 2 and all(state in ("CRASHED", "COMPLETED") for _, state in states), states
    for run in crashed:
        assert "found by `kernelbench-rl sql`" in (run.state.message or ""), run.state.message
    unfinished = [(task.name, task.state.type.value) for task in _task_runs(prefect_api, [run.id for run in runs])
                  if task.state.type.value in ("RUNNING", "PENDING", "SCHEDULED")]
    assert not unfinished, unfinished


def test_a_crash_found_while_no_api_is_up_is_marked_when_one_is(prefect_api: str, tmp_path: Path) -> None:
    """A pipeline on Prefect's temporary API leaves no API behind when it is killed: the crash's mark waits in its
    Prefect home and is applied through the next API of that home (the next pipeline's, or a `serve`'s), flow run,
    subflow run and unfinished task runs alike; a flow run that API does not know keeps waiting."""
    from prefect import flow, runtime, task
    from prefect.client.orchestration import get_client
    from prefect.settings import PREFECT_API_URL, temporary_settings
    from prefect.states import Running

    from kernelbench_rl import prefect_marks

    @task
    def step() -> None:
        pass

    @flow
    def child() -> str:
        step()
        return str(runtime.flow_run.get_id())

    @flow
    def parent() -> tuple[str, str]:
        return str(runtime.flow_run.get_id()), child()

    with temporary_settings(updates={PREFECT_API_URL: prefect_api}):
        ids = parent()
        with get_client(sync_client=True) as client:
            for run_id in ids:  # as a killed process leaves them
                client.set_flow_run_state(run_id, Running(), force=True)
            for task_run in _task_runs(prefect_api, list(ids)):
                client.set_task_run_state(task_run.id, Running(), force=True)
    home = tmp_path / "prefect"
    assert prefect_marks.report_crash(ids[0], "Crashed: found by a test.", api_url="http://127.0.0.1:9/api",
                                      home=str(home)) == "queued"
    prefect_marks.queue(home, {"flow_run_id": "00000000-0000-0000-0000-000000000000", "message": "elsewhere"})
    assert prefect_marks.apply_pending(home, prefect_api) == 1
    assert [mark["flow_run_id"] for mark in prefect_marks.pending(home)] == ["00000000-0000-0000-0000-000000000000"]
    with temporary_settings(updates={PREFECT_API_URL: prefect_api}):
        with get_client(sync_client=True) as client:
            for run_id in ids:
                state = client.read_flow_run(run_id).state
                assert (state.type.value, state.message) == ("CRASHED", "Crashed: found by a test."), state
    tasks = _task_runs(prefect_api, list(ids))
    assert tasks and all(task.state.type.value == "CRASHED" for task in tasks), [(t.name, t.state) for t in tasks]


def test_a_stopped_pipeline_leaves_its_task_runs_cancelled_and_its_exit_code_recorded(prefect_api: str,
                                                                                       tmp_path: Path) -> None:
    """A Ctrl-C'd pipeline: its flow runs end Cancelled (as before) and so does the task run the stop interrupted
    (before: Crashed, as if it had failed); the run's row says stopped, with exit code 130 and when."""
    db = tmp_path / "kb.duckdb"
    proc = _start(_cli("pipeline", "--run-id", "ps", "--db-path", str(db), "--log-dir", str(tmp_path / "logs"),
                       "--no-index", "--train-steps", "30", "sft.enabled=false", "sampling.max_tokens=16"),
                  cwd=tmp_path, env={**ENV, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_API_URL": prefect_api})
    out = Output(proc)
    try:
        _wait_until(proc, out, lambda: len(_rows(db, "SELECT step FROM train_steps")) >= 1)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=HANG_S)
    finally:
        _stop_group(proc)
    assert proc.returncode == ExitCode.STOPPED, out.text()[-3000:]
    runs = _flow_runs(prefect_api, db)
    tasks = _task_runs(prefect_api, [run.id for run in runs])
    assert {run.state.type.value for run in runs} <= {"CANCELLED", "COMPLETED"}, [(r.name, r.state) for r in runs]
    assert not [task.name for task in tasks if task.state.type.value == "CRASHED"], [(t.name, t.state) for t in tasks]
    assert any(task.state.type.value == "CANCELLED" and "Stopped by SIGINT" in (task.state.message or "")
               for task in tasks), [(t.name, t.state) for t in tasks]
    row = _ending(db, "ps")
    assert (row["status"], row["exit_code"], row["ended"]) == ("stopped", ExitCode.STOPPED, True), row


@pytest.fixture
def writable_again() -> Iterator[list[Path]]:
    """Folders a test made read-only, made writable again at its end (root ignores permission bits: chattr +i)."""
    folders: list[Path] = []
    yield folders
    for folder in folders:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(folder)], check=False, capture_output=True)
        folder.chmod(0o755)


def _read_only(folder: Path, made: list[Path]) -> None:
    made.append(folder)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i", str(folder)], check=True, capture_output=True)
    else:
        folder.chmod(0o555)


def test_a_run_whose_database_went_read_only_says_how_it_ended_once_it_can(tmp_path: Path,
                                                                            writable_again: list[Path]) -> None:
    """The database's folder becomes read-only mid-run: `train` stops with one sentence and exit code 6, and its last
    word, which the database could not take then, is kept beside it (before: the row said `running` for ever); once
    the folder is writable again, the next command writes it into the row: failed, exit code 6, the sentence."""
    folder = tmp_path / "runs"
    folder.mkdir()
    db = folder / "kb.duckdb"
    proc = _start(_cli("train", "--no-progress", "run_id=ro", f"db_path={db}", f"log_dir={tmp_path / 'logs'}", *SHORT,
                       "training.steps=40"))
    out = Output(proc)
    try:
        _wait_until(proc, out, lambda: len(_rows(db, "SELECT step FROM train_steps")) >= 1)
        _read_only(folder, writable_again)
        proc.wait(timeout=HANG_S)
    finally:
        _stop_group(proc)
    said = [line for line in out.text().splitlines() if line.startswith("error:")]
    assert proc.returncode == ExitCode.UNWRITABLE, out.text()[-3000:]
    assert len(said) == 1 and str(folder) in said[0], out.text()[-3000:]
    writable_again.remove(folder)
    if os.geteuid() == 0:
        subprocess.run(["chattr", "-i", str(folder)], check=True, capture_output=True)
    folder.chmod(0o755)
    row = _ending(db, "ro")
    assert (row["status"], row["exit_code"], row["ended"]) == ("failed", ExitCode.UNWRITABLE, True), row
    assert said[0].removeprefix("error: ") in row["end_reason"] and "the next command" in row["end_reason"]


# -- 3. Ctrl-C at any moment ------------------------------------------------------------------------------------------
def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


LONG_QUERY = "SELECT count(*) FROM range(20000000000) t WHERE hash(t.range) % 1000 = 7"  # a minute or more


@pytest.mark.parametrize("moment", ["sql, importing", "sql, querying", "pipeline, importing Prefect"])
def test_ctrl_c_at_any_moment_of_a_command_is_one_line_and_130(tmp_path: Path, moment: str) -> None:
    """SIGINT to the command's process group (a terminal's Ctrl-C) while it imports (DuckDB being loaded; the
    pipeline's interpreter loading Prefect after its exec) or while it works (a query DuckDB runs for minutes): exit
    130 and one line (before: a KeyboardInterrupt traceback of tens of lines while importing; while querying, nothing
    until DuckDB had finished the whole query)."""
    db = tmp_path / "kb.duckdb"
    Store(db).init()
    if moment.startswith("sql"):
        proc = _start(_cli("sql", "--db", str(db), LONG_QUERY))

        def ready() -> bool:
            return "_duckdb" in _maps(proc.pid)  # DuckDB's library loaded: the command's imports are under way
    else:
        proc = _start(_cli("pipeline", "--run-id", "c", "--db-path", str(db), "--log-dir", str(tmp_path / "logs")),
                      cwd=tmp_path, env={**ENV, "PREFECT_HOME": str(tmp_path / "prefect")})

        def ready() -> bool:
            return "flows.pipeline" in _cmdline(proc.pid)  # exec'd into the flow module, which imports Prefect
    out = Output(proc)
    try:
        deadline = time.monotonic() + 120
        while not ready():
            assert proc.poll() is None and time.monotonic() < deadline, out.text()[-3000:]
            time.sleep(0.005)
        if moment == "sql, querying":
            time.sleep(3)  # its imports are long done: DuckDB is counting
        elif moment.startswith("pipeline"):
            time.sleep(0.3)
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)  # a bound for a hang (the query alone runs for minutes), not a timing
    finally:
        _stop_group(proc)
    text = out.text()
    lines = [line for line in text.splitlines() if line.strip()]
    assert proc.returncode == ExitCode.STOPPED, text[-3000:]
    assert len(lines) == 1 and "Traceback" not in text and "stopped by SIGINT" in lines[0], text[-3000:]


# -- 2. the pipeline's problems follow --levels -----------------------------------------------------------------------
def test_a_level_without_problems_is_refused_before_prefect_starts(tmp_path: Path) -> None:
    """`pipeline --levels 11`: one sentence and exit code 2, before Prefect (no Prefect database made) and before the
    store (before: Prefect started, then a failed flow run and a traceback-sized report)."""
    home = tmp_path / "prefect"
    done = subprocess.run(_cli("pipeline", "--levels", "11", "--db-path", str(tmp_path / "kb.duckdb"), "--log-dir",
                               str(tmp_path / "logs")), cwd=tmp_path, env={**ENV, "PREFECT_HOME": str(home)},
                          capture_output=True, text=True, timeout=HANG_S)
    said = (done.stdout + done.stderr).strip()
    assert done.returncode == ExitCode.BAD_INPUT, said[-3000:]
    assert said.splitlines() == [said] and "Level 11 has no problems" in said and "--levels" in said, said[-3000:]
    assert not (home / "prefect.db").exists() and not (tmp_path / "kb.duckdb").exists()


def test_the_pipeline_trains_and_evaluates_the_levels_asked_for(prefect_api: str, tmp_path: Path) -> None:
    """`pipeline --levels 2` with the smoke defaults (whose named problems are level 1's): before, "Problem L1/19 is
    not among the loaded problems" and exit 2 once Prefect had started. Now it takes level 2's first training problems
    (those with a known solution), says which, and trains and evaluates on level 2 only."""
    db = tmp_path / "kb.duckdb"
    done = subprocess.run(
        _cli("pipeline", "--run-id", "l2", "--levels", "2", "--db-path", str(db), "--log-dir", str(tmp_path / "logs"),
             "--no-index", "--train-steps", "1", "--eval-samples", "1", "--eval-max-problems", "1", "sft.enabled=false",
             "sampling.max_tokens=16", "sampling.group_size=2"),
        cwd=tmp_path, env={**ENV, "PREFECT_HOME": str(tmp_path / "prefect"), "PREFECT_API_URL": prefect_api},
        capture_output=True, text=True, timeout=HANG_S)
    text = done.stdout + done.stderr
    assert done.returncode == 0, text[-3000:]
    assert "problems (level 2): training on L2/1, L2/12, L2/29, L2/40" in text, text[-3000:]
    trained = {pid for (pid,) in _rows(db, "SELECT DISTINCT problem_id FROM rollouts WHERE run_id = 'l2'")}
    evaluated = {level for (level,) in _rows(db, "SELECT DISTINCT level FROM eval_samples WHERE run_id = 'l2'")}
    assert trained and trained <= {"L2/1", "L2/12", "L2/29", "L2/40"}, trained
    assert evaluated == {2}, evaluated
    assert _rows(db, "SELECT status, exit_code FROM runs WHERE run_id = 'l2'") == [("finished", 0)]


# -- 4. KBRL_MIN_FREE_MB ----------------------------------------------------------------------------------------------
NO_SERVER = "http://127.0.0.1:9/v1"  # nothing listens there: a command that got that far would fail with code 3


@pytest.mark.parametrize("value", ["lots", "-5", "nan"])
@pytest.mark.parametrize("command", ["corpus ingest", "eval-model"])
def test_an_unreadable_min_free_mb_is_refused_by_every_writer(tmp_path: Path, command: str, value: str) -> None:
    """Before, a value that is not a number was silently replaced by the default (and the command went on)."""
    db = tmp_path / "kb.duckdb"
    args = (["corpus", "ingest", "--source", "solutions", "--db", str(db)] if command == "corpus ingest" else
            ["eval-model", "--policy", "openai:m", "--base-url", NO_SERVER, "--db", str(db), "eval.device=cpu"])
    done = subprocess.run(_cli(*args), cwd=REPO, env={**ENV, "KBRL_MIN_FREE_MB": value}, capture_output=True,
                          text=True, timeout=HANG_S)
    said = done.stderr.strip()
    assert done.returncode == ExitCode.BAD_INPUT, (done.stdout[-2000:], said[-2000:])
    assert said.splitlines() == [said] and f"KBRL_MIN_FREE_MB={value!r}" in said, said[-2000:]


def test_eval_model_keeps_the_free_space_floor(tmp_path: Path) -> None:
    """`eval-model` writes every answer as it arrives: with less free space than KBRL_MIN_FREE_MB it stops before it
    asks the model anything (before: it never read the floor, and went on to the server)."""
    done = subprocess.run(_cli("eval-model", "--policy", "openai:m", "--base-url", NO_SERVER, "--db",
                               str(tmp_path / "kb.duckdb"), "eval.device=cpu"),
                          cwd=REPO, env={**ENV, "KBRL_MIN_FREE_MB": str(2**40)}, capture_output=True, text=True,
                          timeout=HANG_S)
    said = done.stderr.strip()
    assert done.returncode == ExitCode.DISK_FULL, said[-2000:]
    assert said.splitlines() == [said] and "KBRL_MIN_FREE_MB" in said and "before the evaluation" in said
