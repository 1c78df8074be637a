"""Faults on the orchestrator's side of `pipeline`, with real processes: Prefect's own database filling a file-size
limit is one sentence naming it with the full-disk code (7), and a stopped pipeline leaves its flow runs Cancelled on
the Prefect server, not Crashed."""

from __future__ import annotations

import os
import re
import resource
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
ENV.pop("PREFECT_API_URL", None)  # the pipeline starts Prefect's temporary API of its own unless a test says
PROGRESS = re.compile(r"^\d\d:\d\d:\d\d\.\d+ \| INFO +\| ")  # a flow's or task's log line (Prefect's console format)


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    with shared_prefect_api() as url:
        yield url


def _pipeline(folder: Path, *extra: str, env: dict[str, str] | None = None, file_size_limit: int | None = None,
              ) -> subprocess.Popen:
    """`pipeline` as a terminal starts it (its own process group, SIGINT at its default), with `ulimit -f` if given."""
    def child() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if file_size_limit is not None:
            resource.setrlimit(resource.RLIMIT_FSIZE, (file_size_limit, file_size_limit))

    return subprocess.Popen(
        [sys.executable, "-m", "kernelbench_rl.cli", "pipeline", "--run-id", "p", "--db-path", str(folder / "kb.duckdb"),
         "--log-dir", str(folder / "logs"), "--no-index", *extra],
        cwd=folder, env={**ENV, "PREFECT_HOME": str(folder / "prefect"), **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True, preexec_fn=child)


class Output:
    """A process's output, read on a thread."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.lines: list[str] = []
        self._thread = threading.Thread(target=lambda: self.lines.extend(proc.stdout), daemon=True)
        self._thread.start()

    def text(self, since: int = 0) -> str:
        self._thread.join(timeout=30)
        return "".join(self.lines[since:])


def _wait_until(proc: subprocess.Popen, out: Output, ready, timeout_s: float = 1200) -> None:
    deadline = time.monotonic() + timeout_s  # a bound for a hang, not a timing
    while not ready():
        assert proc.poll() is None and time.monotonic() < deadline, "".join(out.lines)[-3000:]
        time.sleep(0.5)


def _count(db: Path, table: str) -> int:
    try:
        return Store(db, busy_timeout_s=1).fetchall(f"SELECT count(*) FROM {table}", read_only=True)[0][0]
    except Exception:  # noqa: BLE001 - not there yet, or held for a moment
        return 0


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _finish(proc: subprocess.Popen) -> None:
    try:
        proc.wait(timeout=900)  # a bound for a hang, not a timing
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def test_prefects_database_under_a_file_size_limit_at_the_start_is_one_sentence(tmp_path: Path) -> None:
    """`ulimit -f` on the whole command, with room for our DuckDB file but not for Prefect's database, which its
    temporary server creates at the start (before: the server's tracebacks, restarts until the startup timeout, then
    a traceback and exit 1)."""
    db = tmp_path / "kb.duckdb"
    Store(db).init()  # what the pipeline writes of it before Prefect starts
    limit = db.stat().st_size + 256 * 1024  # Prefect's migrations need more than that for its database
    proc = _pipeline(tmp_path, "--train-steps", "1", file_size_limit=limit)
    out = Output(proc)
    _finish(proc)
    text = out.text().strip()
    prefect_db = tmp_path / "prefect" / "prefect.db"
    assert proc.returncode == ExitCode.DISK_FULL, text[-3000:]
    assert text.splitlines() == [text], text[-3000:]
    assert str(prefect_db) in text and "full" in text and "Traceback" not in text


def test_prefects_database_reaching_a_file_size_limit_mid_run_is_one_sentence(tmp_path: Path) -> None:
    """The temporary server's database meets a file-size limit during SFT (set on the server, where Prefect's
    writes happen; the same limit `ulimit -f` gives it): the next report to the API fails, and the command says so in
    one sentence naming the database, with code 7 (before: HTTP 500s inside tracebacks, exit 1). Nothing is left
    running, and the SFT steps stored stay stored."""
    db = tmp_path / "kb.duckdb"
    proc = _pipeline(tmp_path, "--train-steps", "1", "sft.steps=40", "sft.checkpoint_every=1000")
    out = Output(proc)
    try:
        _wait_until(proc, out, lambda: _count(db, "sft_steps") >= 2)
        children = descendants(proc.pid)
        server = next(pid for pid in children if "uvicorn" in _cmdline(pid))
        seen = len(out.lines)
        # Past 64 KiB of any file, no write: SQLite's log (which it reuses from its start) fills within a few pages.
        resource.prlimit(server, resource.RLIMIT_FSIZE, (65536, 65536))
        stored = _count(db, "sft_steps")
    finally:
        _finish(proc)
    after = out.text(seen)
    assert proc.returncode == ExitCode.DISK_FULL, out.text()[-3000:]
    # The run goes on until its next report to the API (the end of SFT): its progress lines, then one sentence.
    said = [line for line in after.splitlines() if line.strip() and not PROGRESS.match(line)]
    assert len(said) == 1 and "Traceback" not in after, after[-3000:]
    assert str(tmp_path / "prefect" / "prefect.db") in said[0] and "full" in said[0]
    assert not still_alive_after(children, 30)
    assert _count(db, "sft_steps") >= stored


def _flow_run(api_url: str, flow_name: str, db: Path):
    """This test's run of the flow on the server, told apart from other tests' runs by its db_path."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import FlowFilter, FlowFilterName
    from prefect.client.schemas.sorting import FlowRunSort
    from prefect.settings import PREFECT_API_URL, temporary_settings

    with temporary_settings(updates={PREFECT_API_URL: api_url}):
        with get_client(sync_client=True) as client:
            runs = client.read_flow_runs(flow_filter=FlowFilter(name=FlowFilterName(any_=[flow_name])),
                                         sort=FlowRunSort.EXPECTED_START_TIME_DESC, limit=50)
    mine = [run for run in runs if run.parameters.get("db_path") in (str(db), str(db.resolve()))]
    assert len(mine) == 1, [(run.name, run.parameters.get("db_path")) for run in runs]
    return mine[0]


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_stopped_pipeline_leaves_its_flow_runs_cancelled_not_crashed(prefect_api: str, tmp_path: Path,
                                                                      signum: int) -> None:
    """Stopped mid-training (SIGINT to the process group as a terminal's Ctrl-C, or SIGTERM to the process), the
    pipeline's flow run and its curriculum subflow's run end Cancelled with a message naming the signal (before:
    Crashed, which reads as a failure though the run saved its state and resumes)."""
    db = tmp_path / "kb.duckdb"
    proc = _pipeline(tmp_path, "--train-steps", "30", "sft.enabled=false", env={"PREFECT_API_URL": prefect_api})
    out = Output(proc)
    try:
        _wait_until(proc, out, lambda: _count(db, "train_steps") >= 1)
        if signum == signal.SIGINT:
            os.killpg(proc.pid, signum)
        else:
            proc.send_signal(signum)
    finally:
        _finish(proc)
    assert proc.returncode == ExitCode.STOPPED, out.text()[-3000:]
    for name in ("pipeline", "curriculum"):
        state = _flow_run(prefect_api, name, db).state
        assert (state.type.value, state.name) == ("CANCELLED", "Cancelled"), (name, state)
        assert f"Stopped by {signal.Signals(signum).name}" in (state.message or "")
