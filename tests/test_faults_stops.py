"""Stops with real signals to real processes: `sft`, `train` and `pipeline` stop with their state saved, the run
marked `stopped`, one line said, exit code 130 and no process left behind; a stop checkpoint holds exactly the
optimizer steps it names."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from kernelbench_rl.errors import ExitCode
from kernelbench_rl.rag.corpus import ingest_docs, load_source
from kernelbench_rl.store import Store

try:
    from tests.proc_tree import descendants, still_alive_after
except ImportError:  # pragma: no cover - run from tests/
    from proc_tree import descendants, still_alive_after

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
TINY = ["policy.backend=local", "policy.base_model=local:tiny", "policy.lora_rank=4", "problems.levels=[1]",
        "problems.ids=[L1/19,L1/21]", "rag.enabled=false", "eval.device=cpu"]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelbench_rl.cli", *args]


class Lines:
    """A process's output read on a thread, line by line, with the time each arrived."""

    def __init__(self, stream) -> None:
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append((time.monotonic(), line))

    def wait_for(self, prefix: str, proc: subprocess.Popen, timeout_s: float = 900) -> float:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            for at, line in list(self.lines):
                if line.startswith(prefix):
                    return at
            assert proc.poll() is None, "".join(line for _, line in self.lines)[-3000:]
            time.sleep(0.05)
        raise AssertionError(f"no line starting {prefix!r} in time")

    def text(self, since: int = 0) -> str:
        self._thread.join(timeout=30)
        return "".join(line for _, line in self.lines[since:])


def _stop(proc: subprocess.Popen, signum: int) -> set[int]:
    """Send the signal; the processes it had started (all must be gone once it exits)."""
    children = descendants(proc.pid)
    proc.send_signal(signum)
    proc.wait(timeout=600)  # a bound for a hang, not a timing
    return children


def _owned(db: Path, run_id: str, pid: int) -> dict | None:
    if not db.exists():
        return None
    try:
        rows = Store(db, busy_timeout_s=1).dicts("SELECT kind, status, owner_pid FROM runs WHERE run_id = ?", [run_id],
                                                 read_only=True)
    except Exception:  # noqa: BLE001 - the run holds the file for a moment, or has no tables yet
        return None
    return rows[0] if rows and rows[0]["owner_pid"] == pid else None


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_a_stopped_sft_saves_exactly_the_steps_its_checkpoint_names(tmp_path: Path, signum: int) -> None:
    """The signal lands mid-step (half a step after one was printed): the step either finishes and is saved, or is
    not in the checkpoint at all; never its update without its row (the checkpoint named N held N+2 updates)."""
    db = tmp_path / "kb.duckdb"
    ingest_docs(Store(db), load_source("solutions", None, None))
    proc = subprocess.Popen(
        _cli("sft", "run_id=s", f"db_path={db}", f"log_dir={tmp_path / 'logs'}", *TINY, "sampling.max_tokens=400",
             "sft.max_examples=2", "sft.batch_size=2", "sft.steps=500", "sft.checkpoint_every=1000",
             "sft.checkpoint_every_s=0"),
        cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out = Lines(proc.stdout)
    try:
        second = out.wait_for("sft step 2:", proc)
        third = out.wait_for("sft step 3:", proc)
        # While it runs, the run has its row (kind sft, running, owned by this process).
        assert (_owned(db, "s", proc.pid) or {}).get("status") == "running"
        time.sleep((third - second) / 2)
        children = _stop(proc, signum)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert proc.returncode == ExitCode.STOPPED, err[-3000:]
    assert err.splitlines() == [err.strip()] and f"stopped by {signal.Signals(signum).name}" in err
    assert not still_alive_after(children, 30)
    store = Store(db)
    (kind, status, last_step), = store.fetchall("SELECT kind, status, last_step FROM runs WHERE run_id = 's'")
    assert (kind, status) == ("sft", "stopped")
    (step, path), = store.fetchall("SELECT step, state_path FROM sft_steps WHERE state_path IS NOT NULL")
    assert step == last_step >= 3
    assert not Path(path).is_absolute()  # relative to the run's folder
    meta = json.loads((tmp_path / "logs" / "s" / path / "kbrl_checkpoint.json").read_text())
    assert meta["step"] == step + 1  # optimizer updates: steps 0..step, each once
    assert [r[0] for r in store.fetchall("SELECT step FROM sft_steps ORDER BY step")] == list(range(step + 1))


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_train_stops_within_a_token_of_sampling_long_answers(tmp_path: Path, signum: int) -> None:
    """The CPU default's shape (long answers sampled by the local policy, judged by the evaluator): the signal lands
    while a batch of long answers is being decoded. Before, the stop waited for the whole batch (minutes), and the
    process could end in `terminate called without an active exception` (134)."""
    db = tmp_path / "kb.duckdb"
    proc = subprocess.Popen(
        _cli("train", "--no-progress", "run_id=t", f"db_path={db}", f"log_dir={tmp_path / 'logs'}", *TINY,
             "sft.enabled=false", "training.steps=50", "training.batch_problems=2", "sampling.group_size=4",
             "sampling.max_tokens=3000", "rewards.truncated=keep"),
        cwd=REPO, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 900
        while _owned(db, "t", proc.pid) is None:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()[1][-3000:]
            time.sleep(0.5)
        time.sleep(5)  # decoding 3000-token answers on the CPU: far from done
        children = _stop(proc, signum)
    finally:
        if proc.poll() is None:
            proc.kill()
    err = proc.stderr.read()
    assert proc.returncode == ExitCode.STOPPED, err[-3000:]
    assert "terminate called" not in err
    assert err.strip().splitlines() == [f"run t: stopped by {signal.Signals(signum).name}; nothing was saved yet, "
                                        "and the same command resumes it."]
    assert not still_alive_after(children, 30)  # evaluator workers included
    assert Store(db).fetchall("SELECT status FROM runs WHERE run_id = 't'") == [("stopped",)]


def test_train_against_a_busy_run_names_its_owner_and_nothing_else(tmp_path: Path) -> None:
    db = tmp_path / "kb.duckdb"
    code = (f"from kernelbench_rl import ownership; ownership.acquire({str(db)!r}, 'busy'); "
            "print('owned', flush=True); import time; time.sleep(600)")
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=ENV)
    try:
        assert holder.stdout.readline().strip() == "owned"
        done = subprocess.run(_cli("train", "run_id=busy", f"db_path={db}", f"log_dir={tmp_path / 'logs'}", *TINY),
                              cwd=REPO, env=ENV, capture_output=True, text=True, timeout=600)
    finally:
        holder.kill()
        holder.wait()
    assert done.returncode == ExitCode.BUSY
    assert "starting a new run" not in done.stdout and done.stdout == ""
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and f"process {holder.pid}" in done.stderr


def _as_a_foreground_job() -> None:
    """SIGINT as a terminal's foreground job has it (a test run in the background would pass an ignored one on)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def _pipeline(tmp_path: Path, *extra: str) -> subprocess.Popen:
    """`pipeline` as a terminal starts it: the leader of its own process group, SIGINT at its default."""
    return subprocess.Popen(
        _cli("pipeline", "--run-id", "p", "--db-path", str(tmp_path / "kb.duckdb"), "--log-dir", str(tmp_path / "logs"),
             "--no-index", "--train-steps", "1", "sft.checkpoint_every=1000", *extra),
        cwd=tmp_path, env={**ENV, "PREFECT_HOME": str(tmp_path / "prefect")},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, start_new_session=True,
        preexec_fn=_as_a_foreground_job)


@pytest.mark.parametrize("delivery", ["SIGTERM to the process", "SIGINT to the process group"])
def test_a_stopped_pipeline_saves_its_sft_state_and_leaves_no_process(tmp_path: Path, delivery: str) -> None:
    """A supervisor's stop of `pipeline` (exit 143 before, the run marked failed, no SFT checkpoint, Prefect's server
    left running), and a terminal's Ctrl-C, which reaches the whole foreground process group (before: Prefect's
    temporary API server in that group stopped too, and the flow's report of its end failed, a traceback and exit 1):
    130, the run stopped with its SFT state saved, one line after the signal, no process left."""
    db = tmp_path / "kb.duckdb"
    proc = _pipeline(tmp_path)
    out = Lines(proc.stdout)
    try:
        deadline = time.monotonic() + 1200
        while True:
            assert proc.poll() is None and time.monotonic() < deadline, out.text()[-3000:]
            try:
                if Store(db, busy_timeout_s=1).fetchall("SELECT count(*) FROM sft_steps", read_only=True)[0][0] >= 2:
                    break
            except Exception:  # noqa: BLE001 - not there yet, or held for a moment
                pass
            time.sleep(0.5)
        seen = len(out.lines)
        children = descendants(proc.pid)
        assert any("uvicorn" in _cmdline(pid) for pid in children)  # Prefect's temporary API server
        if delivery.startswith("SIGINT"):
            os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C: the terminal signals the whole foreground group
        else:
            proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=600)  # a bound for a hang, not a timing
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    after = out.text(seen)
    name = delivery.split()[0]
    assert proc.returncode == ExitCode.STOPPED, out.text()[-3000:]
    assert after.strip().splitlines() == [after.strip()] and f"stopped by {name}" in after, after
    assert not still_alive_after(children, 30)  # Prefect's server (uvicorn) included
    store = Store(db)
    assert store.fetchall("SELECT kind, status FROM runs WHERE run_id = 'p'") == [("sft", "stopped")]
    (step, path), = store.fetchall("SELECT step, state_path FROM sft_steps WHERE state_path IS NOT NULL")
    meta = json.loads((tmp_path / "logs" / "p" / path / "kbrl_checkpoint.json").read_text())
    assert meta["step"] == step + 1


def test_a_killed_pipeline_takes_its_prefect_server_with_it(tmp_path: Path) -> None:
    """SIGKILL to `pipeline` alone (no clean-up runs): Prefect's temporary API server it started goes too, instead of
    serving on as an orphan."""
    proc = _pipeline(tmp_path)
    out = Lines(proc.stdout)
    try:
        deadline, server = time.monotonic() + 600, None
        while server is None:
            assert proc.poll() is None and time.monotonic() < deadline, out.text()[-3000:]
            server = next((pid for pid in descendants(proc.pid) if "uvicorn" in _cmdline(pid)), None)
            time.sleep(0.2)
        proc.kill()
        proc.wait(timeout=60)
        assert not still_alive_after({server}, 30), _cmdline(server)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        if server is not None and _cmdline(server):
            os.kill(server, signal.SIGKILL)
