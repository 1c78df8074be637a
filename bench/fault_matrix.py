"""Fault injection over the whole matrix on the CPU: every stop (signal x stage) and every kind of damaged state
(damage x file), each in a fresh folder, with the tiny CPU configuration the fault tests use.

    python bench/fault_matrix.py --out bench/results/fault_matrix_cpu.json
    python bench/fault_matrix.py --only "SIGTERM x pipeline,kb.duckdb"      # cells whose names contain either
    python bench/fault_matrix.py --list                                     # the cells' names

Stops: SIGINT (a terminal's Ctrl-C, to the whole foreground process group) and SIGTERM (a supervisor's `kill PID`)
to `sft`, `train` and `pipeline`. Damage: the states `matrix()` lists, each met by the commands a user would run on it.

Each cell reports the exit code (against the one expected), the rows lost (rows the command had stored or reported,
or that were there before it, missing afterwards; for a damaged DuckDB file, which cannot be read, a file the command
changed counts as lost), the processes left (every process the command started, sampled while it ran, plus its
session's members and, run as a script, any orphan adopted by this process as a child subreaper, still alive 30 s
after it exited), and the message's line count (stderr after the signal for a stop, all of stderr for damage;
`pipeline`'s stdout and stderr together). Prints a markdown table, writes JSON with --out, and exits 1 when a cell has
another exit code, loses rows, leaves a process, prints more lines than its bound or misses its own check (named in
the note); 2 for an --only that names no cell.
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import json
import os
import platform
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from kernelbench_rl.errors import ExitCode  # noqa: E402
from kernelbench_rl.store import Store  # noqa: E402

ENV = {**os.environ, "PYTHONPATH": str(REPO), "PYTHONUNBUFFERED": "1"}
# The fault tests' configurations: two level-1 problems, the tiny local policy, no retrieval, the CPU evaluator.
TINY = ["policy.backend=local", "policy.base_model=local:tiny", "policy.lora_rank=4", "problems.levels=[1]",
        "problems.ids=[L1/19,L1/21]", "rag.enabled=false", "eval.device=cpu"]
SHORT = [*TINY, "sft.enabled=false", "training.batch_problems=2", "sampling.group_size=2", "sampling.max_tokens=8",
         "rewards.truncated=keep", "training.checkpoint_every=1", "training.max_steps_off_policy=0"]
PROGRESS = re.compile(r"^\d\d:\d\d:\d\d\.\d+ \| INFO +\| ")  # a flow's or task's log line (Prefect's console format)
GRACE_S = 30.0  # how long the processes a command started may take to go after it exited
HANG_S = 600.0  # a bound for a hang, not a timing
CHECKPOINT_FILES = ("adapter_model.safetensors", "optimizer.pt", "kbrl_checkpoint.json")


@dataclass
class Cell:
    name: str
    expected_exit: int
    max_lines: int = 1
    exit: int | None = None
    rows_lost: int | None = None
    processes_left: int | None = None
    lines: int | None = None
    seconds: float = 0.0
    message: str = ""  # the message's last line, as the user reads it
    tail: str = ""  # the message's end, for a cell that fails (--out keeps it)
    checks: list[str] = field(default_factory=list)  # the cell's own checks that failed

    def failures(self) -> list[str]:
        found = []
        if self.exit != self.expected_exit:
            found.append(f"exit {self.exit}, expected {self.expected_exit}")
        if self.rows_lost != 0:
            found.append(f"rows lost: {self.rows_lost}")
        if self.processes_left != 0:
            found.append(f"processes left: {self.processes_left}")
        if self.lines is None or self.lines > self.max_lines:
            found.append(f"{self.lines} message lines, at most {self.max_lines}")
        return found + self.checks

    @property
    def ok(self) -> bool:
        return not self.failures()


# -- processes ----------------------------------------------------------------------------------------------------

def _stat(pid: int | str) -> list[str] | None:
    """/proc/<pid>/stat after the command name (state, ppid, pgrp, session, ...); None once the pid is gone."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None


def _table() -> dict[int, list[str]]:
    return {int(e): fields for e in os.listdir("/proc") if e.isdigit() and (fields := _stat(e)) is not None}


def _key(pid: int, fields: list[str]) -> tuple[int, str]:
    return pid, fields[19]  # the start time tells a pid apart from a later one reusing its number


def _below(root: int, table: dict[int, list[str]]) -> set[tuple[int, str]]:
    """Descendants of root and members of root's session (a process group leader's session is its pid)."""
    found, frontier = {pid for pid, f in table.items() if f[3] == str(root) and pid != root}, {root}
    while frontier:
        frontier = {pid for pid, f in table.items() if int(f[1]) in frontier} - found
        found |= frontier
    return {_key(pid, table[pid]) for pid in found if pid in table}


def _alive(key: tuple[int, str]) -> bool:
    fields = _stat(key[0])
    return fields is not None and fields[0] != "Z" and fields[19] == key[1]


class Watch:
    """Every process a command starts, sampled twice a second while it runs (evaluation workers are in sessions of
    their own, so a snapshot of its session alone would miss them)."""

    def __init__(self, proc: subprocess.Popen) -> None:
        self.proc, self.seen = proc, set()
        self._own_before = _below(os.getpid(), _table())
        self._thread = threading.Thread(target=self._sample, daemon=True)
        self._thread.start()

    def _sample(self) -> None:
        while self.proc.poll() is None:
            self.seen |= _below(self.proc.pid, _table())
            time.sleep(0.5)

    def left(self) -> int:
        """After the command exited: how many of its processes are still alive once GRACE_S has passed."""
        self._thread.join()
        table = _table()
        suspects = self.seen | _below(self.proc.pid, table)  # its session's members
        if SUBREAPER:  # orphans adopted by this process: their parent (the command) is gone
            suspects |= {k for k in _below(os.getpid(), table) if k not in self._own_before}
        suspects = {k for k in suspects if k[0] != os.getpid()}
        deadline = time.monotonic() + GRACE_S
        while time.monotonic() < deadline and any(_alive(k) for k in suspects):
            time.sleep(0.2)
        left = [k for k in suspects if _alive(k)]
        _reap()
        return len(left)


SUBREAPER = False


def become_subreaper() -> bool:
    """PR_SET_CHILD_SUBREAPER: a process orphaned anywhere below this one is adopted by it, so it can be counted."""
    global SUBREAPER
    try:
        SUBREAPER = ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        SUBREAPER = False
    return SUBREAPER


def _reap() -> None:
    """Collect adopted orphans that have exited (only between cells: every Popen of the cell has been waited for)."""
    if not SUBREAPER:
        return
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


class Lines:
    """A stream read on a thread, line by line, with the time each arrived."""

    def __init__(self, stream) -> None:
        self.lines: list[tuple[float, str]] = []
        self._thread = threading.Thread(target=self._read, args=(stream,), daemon=True)
        self._thread.start()

    def _read(self, stream) -> None:
        for line in stream:
            self.lines.append((time.monotonic(), line))

    def find(self, prefix: str) -> float | None:
        return next((at for at, line in list(self.lines) if line.startswith(prefix)), None)

    def done(self) -> list[str]:
        self._thread.join(timeout=30)
        return [line for _, line in self.lines]


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelbench_rl.cli", *args]


def _start(args: list[str], cwd: Path, env: dict, merge: bool = False, preexec_fn=None) -> subprocess.Popen:
    def child() -> None:
        # As a terminal's foreground job has them: a script started in the background (`&`, nohup) would otherwise
        # pass its ignored SIGINT on, and a command that keeps an ignored SIGINT ignored never sees the Ctrl-C.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        if preexec_fn is not None:
            preexec_fn()

    return subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge else subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=child)


def _wait(cell: Cell, proc: subprocess.Popen, after: str) -> None:
    try:
        proc.wait(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        cell.checks.append(f"still running {HANG_S:.0f} s after {after}")


def _settle(cell: Cell, proc: subprocess.Popen, watch: Watch, message: list[str]) -> list[str]:
    """Once the command has ended: its exit code, its message (the non-blank lines given) and the processes left."""
    cell.exit = proc.returncode
    lines = [line for line in message if line.strip()]
    cell.lines, cell.message, cell.tail = len(lines), (lines[-1].strip() if lines else ""), "".join(lines)[-4000:]
    cell.processes_left = watch.left()
    return lines


def _kill(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()


# -- stores -------------------------------------------------------------------------------------------------------

def _rows(db: Path, sql: str, read_only: bool = False) -> list[tuple] | None:
    """The rows of a query, or None where the file is not there, held for a moment or has no such table yet."""
    if not db.exists():
        return None
    try:
        return Store(db, busy_timeout_s=1).fetchall(sql, read_only=read_only)
    except Exception:  # noqa: BLE001 - a probe: the run holds the file for a moment, or has no tables yet
        return None


def _steps(db: Path, table: str) -> set[int]:
    return {r[0] for r in _rows(db, f"SELECT step FROM {table}") or []}


def _status(db: Path, run_id: str) -> tuple | None:
    rows = _rows(db, f"SELECT kind, status FROM runs WHERE run_id = '{run_id}'")
    return rows[0] if rows else None


# -- stops: signal x stage ----------------------------------------------------------------------------------------

def _ingest_solutions(db: Path) -> None:
    from kernelbench_rl.rag.corpus import ingest_docs, load_source

    ingest_docs(Store(db), load_source("solutions", None, None))


def stop_cell(stage: str, signum: signal.Signals, work: Path) -> Cell:
    """Start `stage`, wait until it is where the fault tests stop it, send the signal, and judge what it left."""
    cell = Cell(f"{signum.name} x {stage}", ExitCode.STOPPED)
    work.mkdir(parents=True)
    db, logs, run_id = work / "kb.duckdb", work / "logs", "s"
    env, merge, cwd = ENV, stage == "pipeline", REPO
    if stage == "sft":
        _ingest_solutions(db)
        args = _cli("sft", f"run_id={run_id}", f"db_path={db}", f"log_dir={logs}", *TINY, "sampling.max_tokens=400",
                    "sft.max_examples=2", "sft.batch_size=2", "sft.steps=500", "sft.checkpoint_every=1000",
                    "sft.checkpoint_every_s=0")
    elif stage == "train":
        args = _cli("train", "--no-progress", f"run_id={run_id}", f"db_path={db}", f"log_dir={logs}", *TINY,
                    "sft.enabled=false", "training.steps=50", "training.batch_problems=2", "sampling.group_size=4",
                    "sampling.max_tokens=3000", "rewards.truncated=keep")
    else:
        args = _cli("pipeline", "--run-id", run_id, "--db-path", str(db), "--log-dir", str(logs), "--no-index",
                    "--train-steps", "1", "sft.checkpoint_every=1000")
        env, cwd = {**ENV, "PREFECT_HOME": str(work / "prefect")}, work
    proc = _start(args, cwd, env, merge=merge)
    watch = Watch(proc)
    out = Lines(proc.stdout)
    err = out if merge else Lines(proc.stderr)
    before: set[int] = set()
    try:
        deadline = time.monotonic() + 1200
        while True:  # where the fault tests stop each stage
            if proc.poll() is not None or time.monotonic() > deadline:
                cell.checks.append(f"ended (rc {proc.poll()}) or hung before the signal: {''.join(err.done()[-5:])}")
                break
            if stage == "sft" and (third := out.find("sft step 3:")) is not None:
                time.sleep((third - out.find("sft step 2:")) / 2)  # mid-step
                break
            if stage == "train":
                owner = _rows(db, f"SELECT owner_pid FROM runs WHERE run_id = '{run_id}'", read_only=True)
                if owner and owner[0][0] == proc.pid:
                    time.sleep(5)  # decoding 3000-token answers on the CPU: far from done
                    break
            if stage == "pipeline":
                steps = _rows(db, "SELECT step FROM sft_steps", read_only=True)
                before = {r[0] for r in steps} if steps is not None else before
                if len(before) >= 2:
                    break
            time.sleep(0.5)
        seen = len(err.lines)
        if proc.poll() is None:
            if signum == signal.SIGINT:
                os.killpg(proc.pid, signum)  # Ctrl-C: the terminal signals the whole foreground group
            else:
                proc.send_signal(signum)
            _wait(cell, proc, signum.name)
    finally:
        _kill(proc)
    printed = "".join(out.done())
    _settle(cell, proc, watch, err.done()[seen:])

    # Rows: every step it printed or that was stored before the signal is stored once, steps 0..last without gaps.
    table = "train_steps" if stage == "train" else "sft_steps"
    pattern = r"^sft step (\d+):" if table == "sft_steps" else rf"^{run_id}: step (\d+) ·"
    claimed = {int(m) for m in re.findall(pattern, printed, flags=re.M)} | before
    stored = _steps(db, table)
    cell.rows_lost = len(claimed - stored) + len(set(range(max(stored, default=-1) + 1)) - stored)
    status = _status(db, run_id)
    if status is None or status[1] != "stopped":
        cell.checks.append(f"run row {status}, not stopped")
    if stage == "pipeline":  # Prefect's record of it: stopped (Cancelled), not Crashed
        states = flow_run_states(work / "prefect" / "prefect.db")
        if states.get("pipeline") != "CANCELLED":
            cell.checks.append(f"the pipeline's flow run is {states.get('pipeline')}, not CANCELLED")
    if stage in ("sft", "pipeline"):  # the stop checkpoint holds exactly the updates it names
        saved = _rows(db, "SELECT step, state_path FROM sft_steps WHERE state_path IS NOT NULL") or []
        if len(saved) != 1:
            cell.checks.append(f"{len(saved)} SFT checkpoints after the stop, expected 1")
        else:
            step, path = saved[0]
            meta = json.loads((logs / run_id / path / "kbrl_checkpoint.json").read_text())
            if meta["step"] != step + 1 or step != max(stored):
                cell.checks.append(f"checkpoint of step {step} holds {meta['step']} updates")
    return cell


# -- damage x file ------------------------------------------------------------------------------------------------

def run_command(cell: Cell, args: list[str], cwd: Path = REPO, env: dict | None = None,
                preexec_fn=None) -> tuple[list[str], list[str]]:
    """Run a command to its end; fills the cell's exit code, message lines and processes left; returns its stdout's
    and its stderr's lines."""
    proc = _start(args, cwd, env or ENV, preexec_fn=preexec_fn)
    watch = Watch(proc)
    out, err = Lines(proc.stdout), Lines(proc.stderr)
    try:
        _wait(cell, proc, "its start")
    finally:
        _kill(proc)
    lines = _settle(cell, proc, watch, err.done())
    if any("Traceback" in line for line in lines):
        cell.checks.append("a traceback")
    return out.done(), lines


def _train(folder: Path, steps: int) -> list[str]:
    return _cli("train", "--no-progress", f"db_path={folder / 'kb.duckdb'}", f"log_dir={folder / 'logs'}", "run_id=r",
                *SHORT, f"training.steps={steps}")


class Fixtures:
    """What several cells start from, made once (only when a chosen cell needs it) and copied for each."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._made: dict[str, Path] = {}
        self.seconds = 0.0  # spent making them (not counted in any cell's time)

    def _once(self, name: str, make: Callable[[Path], None]) -> Path:
        if name not in self._made:
            folder = self.work / "fixtures" / name
            folder.mkdir(parents=True)
            started = time.monotonic()
            make(folder)
            self.seconds += time.monotonic() - started
            self._made[name] = folder
        return self._made[name]

    def copy(self, name: str, make: Callable[[Path], None], to: Path) -> Path:
        shutil.copytree(self._once(name, make), to)
        return to

    @staticmethod
    def database(folder: Path) -> None:
        Store(folder / "kb.duckdb").put_texts("prompt", [f"prompt {i} " + "x" * 200 for i in range(3000)])

    @staticmethod
    def trained_run(folder: Path) -> None:
        """A finished two-step run with a checkpoint after each step."""
        done = subprocess.run(_train(folder, 2), cwd=REPO, env=ENV, capture_output=True, text=True, timeout=HANG_S)
        if done.returncode != 0:
            raise RuntimeError(f"the two-step run the damage cells start from failed: {done.stderr[-2000:]}")

    @staticmethod
    def index(folder: Path) -> None:
        db = folder / "kb.duckdb"
        _ingest_solutions(db)
        done = subprocess.run(_cli("index", "build", "--db", str(db), "--index", str(folder / "rag_index")),
                              cwd=REPO, env=ENV, capture_output=True, text=True, timeout=HANG_S)
        if done.returncode != 0:
            raise RuntimeError(f"index build failed: {done.stderr[-2000:]}")


def _digest(path: Path) -> bytes:
    import hashlib

    return hashlib.sha256(path.read_bytes()).digest()


def database_cell(damage: str, command: str, fixtures: Fixtures, work: Path) -> Cell:
    cell = Cell(f"{damage} x kb.duckdb ({command})", ExitCode.DAMAGED)
    folder = fixtures.copy("database", Fixtures.database, work)
    db = folder / "kb.duckdb"
    size = db.stat().st_size
    with db.open("r+b") as handle:
        if damage == "truncated":
            handle.truncate(size // 5)
        elif damage == "garbled header":
            handle.write(os.urandom(8192))
        else:  # past the header: the blocks that hold the rows
            handle.seek(16384)
            handle.write(os.urandom(size // 3))
    digest = _digest(db)
    if command == "sql":
        run_command(cell, _cli("sql", "--db", str(db), "SELECT count(*), sum(length(text)) FROM blobs"))
    else:
        run_command(cell, _cli("train", f"db_path={db}", f"log_dir={folder / 'logs'}", "run_id=r", *SHORT))
    cell.rows_lost = 0 if db.exists() and _digest(db) == digest else 3000  # unreadable: the file must stay as it was
    if str(db) not in cell.message:
        cell.checks.append("the message does not name the file")
    return cell


def checkpoint_cell(file: str, fixtures: Fixtures, work: Path) -> Cell:
    """The newest checkpoint's file garbled (`every` for every checkpoint's JSON): `train` resumes from the newest
    intact one and redoes what follows, or, with none intact, says so with code 5 and changes nothing."""
    every = file == "every"
    name = "every checkpoint's kbrl_checkpoint.json" if every else f"newest checkpoint's {file}"
    cell = Cell(f"garbled x {name} (train)", ExitCode.DAMAGED if every else ExitCode.OK, max_lines=1 if every else 3)
    folder = fixtures.copy("trained_run", Fixtures.trained_run, work)
    db = folder / "kb.duckdb"
    paths = dict(_rows(db, "SELECT step, state_path FROM checkpoints") or [])
    targets = [folder / "logs" / "r" / p / "kbrl_checkpoint.json" for p in paths.values()] if every else \
        [folder / "logs" / "r" / paths[max(paths)] / file]
    for target in targets:
        data = target.read_bytes()
        target.write_bytes(data[: len(data) // 2] + b"\x00garbled")
    before = _steps(db, "train_steps")
    _, stderr = run_command(cell, _train(folder, 3))
    after = _steps(db, "train_steps")
    cell.rows_lost = len(before - after)
    text = "".join(stderr)
    if every:
        if "no intact checkpoint" not in text or str(targets[0].name) not in text:
            cell.checks.append("the message does not say that no checkpoint is intact")
    else:
        if after != {0, 1, 2}:
            cell.checks.append(f"steps {sorted(after)} after resuming, expected 0-2")
        if f"is damaged ({targets[0]}" not in text or "newest intact one" not in text:
            cell.checks.append("no word of the damaged checkpoint and the fallback")
    return cell


def index_cell(command: str, fixtures: Fixtures, work: Path) -> Cell:
    cell = Cell(f"garbled x index.faiss ({command})", ExitCode.DAMAGED if command == "retrieve" else ExitCode.OK,
                max_lines=1)
    folder = fixtures.copy("index", Fixtures.index, work)
    db, index = folder / "kb.duckdb", folder / "rag_index"
    documents = len(json.loads((index / "index.json").read_text())["doc_sha256"])
    corpus = (_rows(db, "SELECT count(*) FROM corpus_docs") or [(None,)])[0][0]
    (index / "index.faiss").write_bytes(b"garbled" * 10)
    if command == "retrieve":
        run_command(cell, _cli("retrieve", "--problem", "L1/19", "--db", str(db), "--index", str(index), "--no-code"))
        if str(index / "index.faiss") not in cell.message or "rebuild" not in cell.message:
            cell.checks.append("the message does not name the file or say to rebuild it")
    else:
        from kernelbench_rl.rag.index import index_damage

        run_command(cell, _cli("index", "build", "--db", str(db), "--index", str(index)))
        if index_damage(index) is not None:
            cell.checks.append("the index is still damaged after the rebuild")
    now = len(json.loads((index / "index.json").read_text())["doc_sha256"])
    cell.rows_lost = max(0, documents - now) + max(0, corpus - (_rows(db, "SELECT count(*) FROM corpus_docs")
                                                                or [(0,)])[0][0])
    return cell


def _immutable(folder: Path, on: bool) -> None:
    """A folder no user can write into, root included (who ignores permission bits): `chattr +i`, else mode 555."""
    if os.geteuid() == 0:
        subprocess.run(["chattr", "+i" if on else "-i", str(folder)], check=True, capture_output=True)
    else:
        folder.chmod(0o555 if on else 0o755)


def unwritable_cell(holding: bool, fixtures: Fixtures, work: Path) -> Cell:
    cell = Cell(f"unwritable x runs/, {'holding a run' if holding else 'empty'} (train)", ExitCode.UNWRITABLE)
    runs = fixtures.copy("trained_run", Fixtures.trained_run, work / "runs") if holding else work / "runs"
    runs.mkdir(parents=True, exist_ok=True)
    before = _steps(runs / "kb.duckdb", "train_steps")
    _immutable(runs, True)
    try:
        run_command(cell, _train(runs, 3))
    finally:
        _immutable(runs, False)
    cell.rows_lost = len(before - _steps(runs / "kb.duckdb", "train_steps"))
    if str(runs) not in cell.message or "writable" not in cell.message:
        cell.checks.append("the message does not name the folder")
    return cell


def _file_size_limit(limit: int) -> Callable[[], None]:
    def apply() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))
    return apply


def disk_full_cell(what: str, fixtures: Fixtures, work: Path) -> Cell:
    """RLIMIT_FSIZE (`ulimit -f`) on the DuckDB file: a resumed `train` with room for 128 KB more, or a writer of
    many rows under 3 MB; every row stored or reported written is there afterwards (with room again)."""
    if what == "train":
        cell = Cell("file-size limit x kb.duckdb (train)", ExitCode.DISK_FULL)
        folder = fixtures.copy("trained_run", Fixtures.trained_run, work)
        db = folder / "kb.duckdb"
        before = _steps(db, "train_steps")
        run_command(cell, _train(folder, 6), preexec_fn=_file_size_limit(db.stat().st_size + 131072))
        cell.rows_lost = len(before - _steps(db, "train_steps"))
    else:
        cell = Cell("file-size limit x kb.duckdb (store writes)", ExitCode.DISK_FULL)
        db = work / "kb.duckdb"
        work.mkdir(parents=True)
        code = ("import sys\nfrom kernelbench_rl.store import Store\nfrom kernelbench_rl.errors import UserError\n"
                f"store = Store({str(db)!r})\nwritten = 0\ntry:\n    for i in range(400):\n"
                "        store.put_texts('prompt', [f'{i} {j} ' + 'y' * 300 for j in range(200)])\n"
                "        written += 200\nexcept UserError as exc:\n    print(written)\n    print(exc, file=sys.stderr)\n"
                "    sys.exit(int(exc.exit_code))\n")
        out, _ = run_command(cell, [sys.executable, "-c", code], preexec_fn=_file_size_limit(3_000_000))
        written = int(out[0]) if out and out[0].strip().isdigit() else 0
        stored = (_rows(db, "SELECT count(*) FROM blobs") or [(0,)])[0][0]
        cell.rows_lost = max(0, written - stored)
        if written == 0:
            cell.checks.append("nothing was written before the limit")
    if str(db) not in cell.message or "full" not in cell.message:
        cell.checks.append("the message does not name the file")
    return cell


def flow_run_states(prefect_db: Path) -> dict[str, str]:
    """Flow name -> state type of its newest run, read from the temporary API's SQLite database after the command."""
    import sqlite3

    if not prefect_db.exists():
        return {}
    try:
        with contextlib.closing(sqlite3.connect(f"file:{prefect_db}?mode=ro", uri=True)) as db:
            rows = db.execute("SELECT flow.name, flow_run.state_type FROM flow_run JOIN flow ON flow.id = flow_run.flow_id "
                              "ORDER BY flow_run.created").fetchall()
    except sqlite3.Error:
        return {}
    return {name: state for name, state in rows}


def _pipeline_args(work: Path, *extra: str) -> list[str]:
    return _cli("pipeline", "--run-id", "p", "--db-path", str(work / "kb.duckdb"), "--log-dir", str(work / "logs"),
                "--no-index", "--train-steps", "1", *extra)


def prefect_db_cell(when: str, work: Path) -> Cell:
    """Prefect's own database (its temporary API's, in PREFECT_HOME) meets a file-size limit: at the start (`ulimit -f`
    on the whole command, room for our DuckDB file but not for Prefect's migrations), or mid-run (the limit set on the
    running server during SFT). One sentence naming it, code 7; the SFT steps stored stay stored."""
    cell = Cell(f"file-size limit x prefect.db, {when} (pipeline)", ExitCode.DISK_FULL)
    work.mkdir(parents=True)
    db, prefect_db = work / "kb.duckdb", work / "prefect" / "prefect.db"
    env = {**ENV, "PREFECT_HOME": str(work / "prefect")}
    if when == "at the start":
        Store(db).init()
        limit = db.stat().st_size + 256 * 1024
        run_command(cell, _pipeline_args(work), cwd=work, env=env, preexec_fn=_file_size_limit(limit))
        cell.rows_lost = 0  # nothing was stored yet
    else:
        proc = _start(_pipeline_args(work, "sft.steps=40", "sft.checkpoint_every=1000"), work, env, merge=True)
        watch, out = Watch(proc), Lines(proc.stdout)
        seen, stored = 0, set()
        try:
            deadline = time.monotonic() + 1200
            while proc.poll() is None and time.monotonic() < deadline and len(_steps(db, "sft_steps")) < 2:
                time.sleep(0.5)
            server = next((k[0] for k in watch.seen | _below(proc.pid, _table()) if "uvicorn" in _cmdline(k[0])), None)
            if server is None or proc.poll() is not None:
                cell.checks.append(f"no temporary API server, or ended (rc {proc.poll()}) before the limit")
            else:
                seen = len(out.lines)
                resource.prlimit(server, resource.RLIMIT_FSIZE, (65536, 65536))
                stored = _steps(db, "sft_steps")
            _wait(cell, proc, "the limit")
        finally:
            _kill(proc)
        # The run goes on until its next report to the API: its progress lines (Prefect's INFO logs) are not messages.
        _settle(cell, proc, watch, [line for line in out.done()[seen:] if not PROGRESS.match(line)])
        cell.rows_lost = len(stored - _steps(db, "sft_steps"))
    if str(prefect_db) not in cell.message or "full" not in cell.message:
        cell.checks.append("the message does not name Prefect's database")
    return cell


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def free_space_cell(fixtures: Fixtures, work: Path) -> Cell:
    cell = Cell("free space < KBRL_MIN_FREE_MB x runs/ (train)", ExitCode.DISK_FULL)
    folder = fixtures.copy("trained_run", Fixtures.trained_run, work)
    before = _steps(folder / "kb.duckdb", "train_steps")
    run_command(cell, _train(folder, 3), env={**ENV, "KBRL_MIN_FREE_MB": str(2**40)})
    cell.rows_lost = len(before - _steps(folder / "kb.duckdb", "train_steps"))
    if "KBRL_MIN_FREE_MB" not in cell.message:
        cell.checks.append("the message does not name KBRL_MIN_FREE_MB")
    return cell


# -- the matrix ---------------------------------------------------------------------------------------------------

def matrix() -> list[tuple[str, Callable[[Fixtures, Path], Cell]]]:
    """Every cell's name and how to run it (in a folder of its own), cheap cells first within each part."""
    cells: list[tuple[str, Callable[[Fixtures, Path], Cell]]] = []
    for stage in ("sft", "train", "pipeline"):
        for signum in (signal.SIGINT, signal.SIGTERM):
            cells.append((f"{signum.name} x {stage}", lambda f, w, s=stage, n=signum: stop_cell(s, n, w)))
    for damage in ("truncated", "garbled header", "garbled blocks"):
        for command in ("sql", "train"):
            cells.append((f"{damage} x kb.duckdb ({command})",
                          lambda f, w, d=damage, c=command: database_cell(d, c, f, w)))
    for file in (*CHECKPOINT_FILES, "every"):
        name = "every checkpoint's kbrl_checkpoint.json" if file == "every" else f"newest checkpoint's {file}"
        cells.append((f"garbled x {name} (train)", lambda f, w, x=file: checkpoint_cell(x, f, w)))
    for command in ("retrieve", "index build"):
        cells.append((f"garbled x index.faiss ({command})", lambda f, w, c=command: index_cell(c, f, w)))
    for holding in (False, True):
        cells.append((f"unwritable x runs/, {'holding a run' if holding else 'empty'} (train)",
                      lambda f, w, h=holding: unwritable_cell(h, f, w)))
    for what in ("train", "store writes"):
        cells.append((f"file-size limit x kb.duckdb ({what})", lambda f, w, x=what: disk_full_cell(x, f, w)))
    for when in ("at the start", "mid-run"):
        cells.append((f"file-size limit x prefect.db, {when} (pipeline)", lambda f, w, x=when: prefect_db_cell(x, w)))
    cells.append(("free space < KBRL_MIN_FREE_MB x runs/ (train)", free_space_cell))
    return cells


def select(only: list[str]) -> list[tuple[str, Callable[[Fixtures, Path], Cell]]]:
    """The cells whose names contain any of the patterns (case-insensitive); all cells for none."""
    patterns = [p.strip().lower() for p in only if p.strip()]
    return [(name, run) for name, run in matrix() if not patterns or any(p in name.lower() for p in patterns)]


def run_matrix(cells: list[tuple[str, Callable[[Fixtures, Path], Cell]]], work: Path,
               progress: Callable[[Cell], None] | None = None) -> list[Cell]:
    fixtures, done = Fixtures(work), []
    for number, (name, run) in enumerate(cells):
        started, setup = time.monotonic(), fixtures.seconds
        try:
            cell = run(fixtures, work / f"cell{number:02d}")
        except Exception as exc:  # noqa: BLE001 - a cell that cannot run is a failed row, not the end of the matrix
            cell = Cell(name, -1, checks=[f"could not run: {type(exc).__name__}: {exc}"[:500]])
        if cell.name != name:  # the registry and the cell agree on the name --only matched
            cell.checks.append(f"reported as {cell.name!r}")
            cell.name = name
        cell.seconds = round(time.monotonic() - started - (fixtures.seconds - setup), 1)
        done.append(cell)
        if progress:
            progress(cell)
    return done


def markdown_table(cells: list[Cell]) -> str:
    rows = ["| cell | exit (expected) | rows lost | processes left | message lines (at most) | s | ok |",
            "|---|---|---|---|---|---|---|"]
    for c in cells:
        rows.append(f"| {c.name} | {c.exit} ({c.expected_exit}) | {c.rows_lost} | {c.processes_left} | "
                    f"{c.lines} ({c.max_lines}) | {c.seconds:.0f} | {'yes' if c.ok else '**no**'} |")
    failed = [c for c in cells if not c.ok]
    if failed:
        rows.append("")
        rows.extend(f"- {c.name}: {'; '.join(c.failures())} (last line: {c.message[:300]!r})" for c in failed)
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated parts of cell names (e.g. 'SIGTERM,index.faiss')")
    parser.add_argument("--out", default="", help="JSON report path")
    parser.add_argument("--list", action="store_true", help="print the cells' names and exit")
    parser.add_argument("--keep", default="", help="work in this folder and keep it (default: a temporary one)")
    args = parser.parse_args(argv)
    cells = select(args.only.split(","))
    if args.list:
        print("\n".join(name for name, _ in cells))
        return 0
    if not cells:
        print(f"--only {args.only!r} names no cell; --list prints their names.", file=sys.stderr)
        return 2
    become_subreaper()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kbrl-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    started, load = time.monotonic(), os.getloadavg()
    print(f"{len(cells)} cells in {work} (load average {load[0]:.1f}, {os.cpu_count()} CPUs)", flush=True)
    try:
        results = run_matrix(cells, work, progress=lambda c: print(
            f"{c.name}: exit {c.exit}, rows lost {c.rows_lost}, processes left {c.processes_left}, "
            f"{c.lines} lines, {c.seconds:.0f} s{'' if c.ok else ' -- ' + '; '.join(c.failures())}", flush=True))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    wall = time.monotonic() - started
    print()
    print(markdown_table(results))
    failed = sum(not c.ok for c in results)
    print(f"\n{len(results) - failed} of {len(results)} cells hold; {wall:.0f} s")
    if args.out:
        report = {"machine": platform.platform(), "cpus": os.cpu_count(), "load_before": load,
                  "load_after": os.getloadavg(), "wall_s": round(wall, 1), "subreaper": SUBREAPER,
                  "cells": [{**asdict(c), "ok": c.ok, "failures": c.failures()} for c in results]}
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(report, indent=2) + "\n")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
