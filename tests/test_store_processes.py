"""Store behaviour across real processes: crashes, concurrent writers, readers during a run, busy files."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from kernelbench_rl.errors import StoreBusyError
from kernelbench_rl.store import Store

# Each child runs one of these jobs; arguments arrive as JSON in argv[1].
WORKER = textwrap.dedent(
    """
    import json, sys, time
    from pathlib import Path
    from kernelbench_rl.store import Store

    args = json.loads(sys.argv[1])
    store = Store(args["db"], busy_timeout_s=args.get("busy_timeout_s", 30))
    job = args["job"]

    if job == "big_batches":  # endless batches of run_id=batchK; a marker says which batch starts
        marker = Path(args["marker"])
        for k in range(10_000):
            marker.write_text(str(k))
            store.upsert("rollouts", [
                {"run_id": f"batch{k}", "step": i, "problem_id": "x" * 200, "sample_index": 0, "turn": 0}
                for i in range(args["batch"])
            ])
    elif job == "small_batches":  # a fixed number of small batches, reading now and then
        for k in range(args["batches"]):
            store.upsert("rollouts", [
                {"run_id": args["name"], "step": k * args["batch"] + i, "problem_id": "p", "sample_index": 0, "turn": 0}
                for i in range(args["batch"])
            ])
            if k % 5 == 0:
                store.query("SELECT count(*) FROM rollouts", read_only=k % 10 == 0)
    elif job == "alternate":  # write only on our turn, then hand the turn to the other process
        turn = Path(args["turn"])
        for k in range(args["turns"]):
            while turn.read_text() != args["name"]:
                time.sleep(0.002)
            store.upsert("rollouts", [{"run_id": args["name"], "step": k, "problem_id": "p", "sample_index": 0, "turn": 0}])
            turn.write_text(args["other"])
    elif job == "loop_until_stopped":  # a long run: small batches back to back
        stop = Path(args["stop"])
        # Rows built once, so the gap between two batches is as short as the Store makes it.
        rows = [{"run_id": "loop", "step": i, "problem_id": "p", "sample_index": 0, "turn": 0} for i in range(2000)]
        k = 0
        while not stop.exists():
            store.upsert("rollouts", rows)
            k += 1
            if k == 1:
                print("writing", flush=True)
    elif job == "hold":  # keep the file open far longer than the others' busy timeout
        with store.connect():
            print("holding", flush=True)
            time.sleep(args["seconds"])
    elif job == "hold_raw":  # a process outside our turn-taking (think: the duckdb CLI) holds the file
        import duckdb
        con = duckdb.connect(args["db"])
        print("holding", flush=True)
        time.sleep(args["seconds"])
    """
)


def start(job: str, db: Path, **args) -> subprocess.Popen:
    payload = json.dumps({"job": job, "db": str(db), **args})
    return subprocess.Popen(
        [sys.executable, "-c", WORKER, payload],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=Path(__file__).resolve().parents[1],
    )


def finish(proc: subprocess.Popen, timeout: float = 60) -> None:
    out, err = proc.communicate(timeout=timeout)
    assert proc.returncode == 0, err[-2000:]


def wait_for_line(proc: subprocess.Popen, expected: str) -> None:
    line = proc.stdout.readline().strip()
    assert line == expected, f"child said {line!r}; stderr: {proc.stderr.read()[-2000:] if proc.poll() is not None else ''}"


def test_sigkill_mid_batch_leaves_only_whole_batches(tmp_path: Path) -> None:
    db, marker, batch = tmp_path / "kill.duckdb", tmp_path / "marker", 30_000
    Store(db).init()
    proc = start("big_batches", db, marker=str(marker), batch=batch)
    reader = Store(db, busy_timeout_s=30)
    try:
        # Read while it writes: committed batches are whole even before the crash.
        while not marker.exists() or int(marker.read_text()) < 3:
            assert proc.poll() is None, proc.stderr.read()[-2000:]
            counts = reader.fetchall("SELECT count(*) FROM rollouts GROUP BY run_id", read_only=True)
            assert all(c == (batch,) for c in counts)
            time.sleep(0.05)
        time.sleep(0.15)  # into batch 3's transaction (a batch takes well over 0.1 s)
    finally:
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(timeout=30)
    assert proc.returncode == -signal.SIGKILL

    reopened = Store(db)
    per_batch = reopened.fetchall("SELECT run_id, count(*) FROM rollouts GROUP BY run_id ORDER BY run_id", read_only=True)
    total = reopened.count("rollouts")
    assert total % batch == 0 and total >= 3 * batch
    assert all(count == batch for _, count in per_batch)
    assert {run for run, _ in per_batch} == {f"batch{k}" for k in range(len(per_batch))}  # no gap
    # The file is writable again after the crash.
    reopened.upsert("runs", [{"run_id": "after-crash"}])
    assert reopened.count("runs") == 1


def test_two_processes_writing_concurrently_both_land_every_row(tmp_path: Path) -> None:
    db = tmp_path / "concurrent.duckdb"
    procs = [start("small_batches", db, name=name, batches=20, batch=5) for name in ("a", "b")]
    for proc in procs:
        finish(proc)
    store = Store(db)
    assert store.fetchall("SELECT run_id, count(*), count(DISTINCT step) FROM rollouts GROUP BY 1 ORDER BY 1") == [
        ("a", 100, 100),
        ("b", 100, 100),
    ]


def test_two_processes_writing_alternately_both_succeed(tmp_path: Path) -> None:
    db, turn = tmp_path / "alternate.duckdb", tmp_path / "turn"
    turn.write_text("a")
    procs = [
        start("alternate", db, name="a", other="b", turn=str(turn), turns=8),
        start("alternate", db, name="b", other="a", turn=str(turn), turns=8),
    ]
    for proc in procs:
        finish(proc)
    # Strict alternation means each write happened right after the other process's write
    # closed the file: neither process kept it open between calls.
    rows = Store(db).fetchall("SELECT run_id FROM rollouts ORDER BY created_at")
    assert [r[0] for r in rows] == ["a", "b"] * 8


def test_readers_and_writers_get_in_while_a_long_run_writes(tmp_path: Path) -> None:
    db, stop = tmp_path / "run.duckdb", tmp_path / "stop"
    Store(db).init()
    proc = start("loop_until_stopped", db, stop=str(stop))
    try:
        wait_for_line(proc, "writing")
        # A busy timeout far shorter than the run: only turn-taking gets us in.
        other = Store(db, busy_timeout_s=5)
        for k in range(10):
            assert other.count("rollouts") >= 1
            other.upsert("runs", [{"run_id": f"other{k}"}])
        assert other.query("SELECT count(*) AS n FROM runs", read_only=True)["n"].to_list() == [10]
    finally:
        stop.touch()
    finish(proc)


def test_a_file_held_past_the_busy_timeout_fails_with_one_sentence(tmp_path: Path) -> None:
    db = tmp_path / "held.duckdb"
    Store(db).init()
    for job in ("hold", "hold_raw"):
        proc = start(job, db, seconds=60)
        try:
            wait_for_line(proc, "holding")
            waiting = Store(db, busy_timeout_s=1)
            with pytest.raises(StoreBusyError) as info:
                waiting.upsert("runs", [{"run_id": "x"}])
            with pytest.raises(StoreBusyError):
                waiting.query("SELECT 1", read_only=True)
        finally:
            proc.kill()
            proc.wait(timeout=30)
        message = str(info.value)
        assert "\n" not in message and message.endswith(".") and message.count(". ") == 0
        assert str(db) in message
        if job == "hold_raw":
            assert f"process {proc.pid}" in message  # DuckDB names the holder
    # Once the holder is gone the same store works.
    Store(db, busy_timeout_s=5).upsert("runs", [{"run_id": "x"}])
