"""Fault injection over the whole matrix on the CPU: every stop (signal x stage) and every kind of damaged state
(damage x file), each in a fresh folder, with the tiny CPU configuration the fault tests use.

    python bench/fault_matrix.py --out bench/results/fault_matrix_cpu.json
    python bench/fault_matrix.py --only "SIGTERM x pipeline,kb.duckdb"      # cells whose names contain either
    python bench/fault_matrix.py --list                                     # the cells' names

Stops: SIGINT (a terminal's Ctrl-C, to the whole foreground process group) and SIGTERM (a supervisor's `kill PID`)
to `sft`, `train` and `pipeline`. Damage: the states `_damages()` lists, each met by the commands a user would run on it.

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
import hashlib
import json
import os
import platform
import re
import resource
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above

from kernelbench_rl.errors import ExitCode  # noqa: E402
from kernelbench_rl.store import Store  # noqa: E402

REPO = harness.REPO
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

def _table() -> dict[int, list[str]]:
    return {int(e): fields for e in os.listdir("/proc") if e.isdigit() and (fields := harness.proc_stat(e)) is not None}


def _below(root: int, table: dict[int, list[str]]) -> set[tuple[int, str]]:
    """Descendants of root and members of root's session (a process group leader's session is its pid)."""
    found, frontier = {pid for pid, f in table.items() if f[3] == str(root) and pid != root}, {root}
    while frontier:
        frontier = {pid for pid, f in table.items() if int(f[1]) in frontier} - found
        found |= frontier
    return {(pid, table[pid][19]) for pid in found if pid in table}  # its start time tells it from a reused pid


def _alive(key: tuple[int, str]) -> bool:
    fields = harness.proc_stat(key[0])
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
    while SUBREAPER:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


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


@dataclass
class Running:
    """A command started in a session of its own: its processes watched, its output read as it comes."""
    proc: subprocess.Popen
    watch: Watch
    out: Lines
    err: Lines  # the same as `out` where stderr goes to stdout


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "kernelbench_rl.cli", *args]


@contextlib.contextmanager
def launched(args: list[str], cwd: Path = REPO, env: dict | None = None, merge: bool = False,
             preexec_fn: Callable[[], None] | None = None) -> Iterator[Running]:
    """The command running for the block; killed with its whole session at the block's end if it is still there."""
    def child() -> None:
        # As a terminal's foreground job has them: a script started in the background (`&`, nohup) would otherwise
        # pass its ignored SIGINT on, and a command that keeps an ignored SIGINT ignored never sees the Ctrl-C.
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        signal.signal(signal.SIGQUIT, signal.SIG_DFL)
        if preexec_fn is not None:
            preexec_fn()

    proc = subprocess.Popen(args, cwd=cwd, env=env or ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT if merge else subprocess.PIPE, text=True,
                            start_new_session=True, preexec_fn=child)
    out = Lines(proc.stdout)
    try:
        yield Running(proc, Watch(proc), out, out if merge else Lines(proc.stderr))
    finally:
        if proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def _wait(cell: Cell, proc: subprocess.Popen, after: str) -> None:
    try:
        proc.wait(timeout=HANG_S)
    except subprocess.TimeoutExpired:
        cell.checks.append(f"still running {HANG_S:.0f} s after {after}")


def _settle(cell: Cell, run: Running, message: list[str]) -> list[str]:
    """Once the command has ended: its exit code, its message (the non-blank lines given) and the processes left."""
    cell.exit = run.proc.returncode
    lines = [line for line in message if line.strip()]
    cell.lines, cell.message, cell.tail = len(lines), (lines[-1].strip() if lines else ""), "".join(lines)[-4000:]
    cell.processes_left = run.watch.left()
    return lines


def run_command(cell: Cell, args: list[str], cwd: Path = REPO, env: dict | None = None,
                preexec_fn: Callable[[], None] | None = None) -> tuple[list[str], list[str]]:
    """Run a command to its end; fills the cell's exit code, message lines and processes left; returns its stdout's
    and its stderr's lines."""
    with launched(args, cwd, env, preexec_fn=preexec_fn) as run:
        _wait(cell, run.proc, "its start")
    lines = _settle(cell, run, run.err.done())
    if any("Traceback" in line for line in lines):
        cell.checks.append("a traceback")
    return run.out.done(), lines


def interrupted(cell: Cell, args: list[str], ready: Callable[[Running], bool], act: Callable[[Running], None],
                what: str, cwd: Path = REPO, env: dict | None = None, merge: bool = False) -> tuple[Running, list[str]]:
    """Start a command, poll `ready(run)` until it is where the cell acts on it, `act(run)` (a signal, a limit), and
    wait for its end. Returns the run and the lines of its message stream printed after the act."""
    with launched(args, cwd, env, merge) as run:
        deadline = time.monotonic() + 1200
        while not ready(run):
            if run.proc.poll() is not None or time.monotonic() > deadline:
                cell.checks.append(f"ended (rc {run.proc.poll()}) or hung before {what}: "
                                   + "".join(line for _, line in run.err.lines[-5:]))
                break
            time.sleep(0.5)
        seen = len(run.err.lines)
        if run.proc.poll() is None and not cell.checks:
            act(run)
            _wait(cell, run.proc, what)
    return run, run.err.done()[seen:]


# -- stores -------------------------------------------------------------------------------------------------------

def _rows(db: Path, sql: str, read_only: bool = False) -> list[tuple] | None:
    """The rows of a query, or None where the file is not there, held for a moment or has no such table yet."""
    if not db.exists():
        return None
    try:
        return Store(db, busy_timeout_s=1).fetchall(sql, read_only=read_only)
    except Exception:  # noqa: BLE001 - a probe: the run holds the file for a moment, or has no tables yet
        return None


def _steps(db: Path, table: str, read_only: bool = False) -> set[int]:
    return {r[0] for r in _rows(db, f"SELECT step FROM {table}", read_only) or []}


def _count(db: Path, table: str) -> int:
    return (_rows(db, f"SELECT count(*) FROM {table}") or [(0,)])[0][0]


def _ingest_solutions(db: Path) -> None:
    from kernelbench_rl.rag.corpus import ingest_docs, load_source

    ingest_docs(Store(db), load_source("solutions", None, None))


def flow_run_states(prefect_db: Path) -> dict[str, str]:
    """Flow name -> state type of its newest run, read from the temporary API's SQLite database after the command."""
    if not prefect_db.exists():
        return {}
    try:
        with contextlib.closing(sqlite3.connect(f"file:{prefect_db}?mode=ro", uri=True)) as db:
            rows = db.execute("SELECT flow.name, flow_run.state_type FROM flow_run JOIN flow ON flow.id = flow_run.flow_id "
                              "ORDER BY flow_run.created").fetchall()
    except sqlite3.Error:
        return {}
    return {name: state for name, state in rows}


def _train(folder: Path, steps: int) -> list[str]:
    return _cli("train", "--no-progress", f"db_path={folder / 'kb.duckdb'}", f"log_dir={folder / 'logs'}", "run_id=r",
                *SHORT, f"training.steps={steps}")


def _pipeline(work: Path, *extra: str) -> list[str]:
    return _cli("pipeline", "--run-id", "p", "--db-path", str(work / "kb.duckdb"), "--log-dir", str(work / "logs"),
                "--no-index", "--train-steps", "1", *extra)


def _prefect_env(work: Path) -> dict[str, str]:
    return {**ENV, "PREFECT_HOME": str(work / "prefect")}


def _file_size_limit(limit: int) -> Callable[[], None]:
    """For a child before it starts: RLIMIT_FSIZE (`ulimit -f`), a write past `limit` bytes fails."""
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))


# -- stops: signal x stage ----------------------------------------------------------------------------------------

def stop_cell(stage: str, signum: signal.Signals, work: Path) -> Cell:
    """Start `stage`, wait until it is where the fault tests stop it, send the signal, and judge what it left: every
    step it printed or that was stored before the signal is stored once, steps 0..last without gaps; its run row
    stopped; the pipeline's flow run Cancelled (Prefect's record of it, not Crashed); an SFT stop checkpoint holding
    exactly the updates it names."""
    cell = Cell(f"{signum.name} x {stage}", ExitCode.STOPPED)
    work.mkdir(parents=True)
    db, logs, run_id = work / "kb.duckdb", work / "logs", "s"
    table = "train_steps" if stage == "train" else "sft_steps"
    before: set[int] = set()
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

    def ready(run: Running) -> bool:  # where the fault tests stop each stage
        if stage == "sft":
            third = run.out.find("sft step 3:")
            if third is not None:
                time.sleep((third - run.out.find("sft step 2:")) / 2)  # mid-step
            return third is not None
        if stage == "train":
            owner = _rows(db, f"SELECT owner_pid FROM runs WHERE run_id = '{run_id}'", read_only=True)
            if owner and owner[0][0] == run.proc.pid:
                time.sleep(5)  # decoding 3000-token answers on the CPU: far from done
                return True
            return False
        before.update(_steps(db, "sft_steps", read_only=True))
        return len(before) >= 2

    def stop(run: Running) -> None:
        if signum == signal.SIGINT:
            os.killpg(run.proc.pid, signum)  # Ctrl-C: the terminal signals the whole foreground group
        else:
            run.proc.send_signal(signum)

    pipeline = stage == "pipeline"
    run, message = interrupted(cell, args, ready, stop, signum.name, work if pipeline else REPO,
                               _prefect_env(work) if pipeline else ENV, merge=pipeline)
    _settle(cell, run, message)
    pattern = r"^sft step (\d+):" if table == "sft_steps" else rf"^{run_id}: step (\d+) ·"
    claimed = {int(m) for m in re.findall(pattern, "".join(run.out.done()), flags=re.M)} | before
    stored = _steps(db, table)
    cell.rows_lost = len(claimed - stored) + len(set(range(max(stored, default=-1) + 1)) - stored)
    status = (_rows(db, f"SELECT kind, status FROM runs WHERE run_id = '{run_id}'") or [None])[0]
    if status is None or status[1] != "stopped":
        cell.checks.append(f"run row {status}, not stopped")
    if pipeline and (state := flow_run_states(work / "prefect" / "prefect.db").get("pipeline")) != "CANCELLED":
        cell.checks.append(f"the pipeline's flow run is {state}, not CANCELLED")
    if stage != "train":  # the stop checkpoint holds exactly the updates it names
        saved = _rows(db, "SELECT step, state_path FROM sft_steps WHERE state_path IS NOT NULL") or []
        if len(saved) != 1:
            cell.checks.append(f"{len(saved)} SFT checkpoints after the stop, expected 1")
        else:
            step, path = saved[0]
            meta = json.loads((logs / run_id / path / "kbrl_checkpoint.json").read_text())
            if meta["step"] != step + 1 or step != max(stored):
                cell.checks.append(f"checkpoint of step {step} holds {meta['step']} updates")
    return cell


def prefect_limit_mid_run(work: Path) -> Cell:
    """Prefect's own database (its temporary API's, in PREFECT_HOME) meets a file-size limit mid-run: the limit set on
    the running server during SFT. One sentence naming it, code 7; the SFT steps stored stay stored."""
    cell = Cell("file-size limit x prefect.db, mid-run (pipeline)", ExitCode.DISK_FULL)
    work.mkdir(parents=True)
    db = work / "kb.duckdb"
    stored: set[int] = set()

    def limit(run: Running) -> None:
        server = next((k[0] for k in run.watch.seen | _below(run.proc.pid, _table()) if "uvicorn" in _cmdline(k[0])), None)
        if server is None:
            cell.checks.append("no temporary API server to limit")
            return
        resource.prlimit(server, resource.RLIMIT_FSIZE, (65536, 65536))
        stored.update(_steps(db, "sft_steps"))

    run, message = interrupted(cell, _pipeline(work, "sft.steps=40", "sft.checkpoint_every=1000"),
                               lambda _run: len(_steps(db, "sft_steps")) >= 2, limit, "the limit", work,
                               _prefect_env(work), merge=True)
    # The run goes on until its next report to the API: its progress lines (Prefect's INFO logs) are not messages.
    _settle(cell, run, [line for line in message if not PROGRESS.match(line)])
    cell.rows_lost = len(stored - _steps(db, "sft_steps"))
    if str(work / "prefect" / "prefect.db") not in cell.message or "full" not in cell.message:
        cell.checks.append("the message does not name Prefect's database")
    return cell


# -- damage x file ------------------------------------------------------------------------------------------------

class Fixtures:
    """What several cells start from, made once (only when a chosen cell needs it) and copied for each."""

    def __init__(self, work: Path) -> None:
        self.work = work
        self._made: dict[str, Path] = {}
        self.seconds = 0.0  # spent making them (not counted in any cell's time)

    def copy(self, name: str, to: Path) -> Path:
        if name not in self._made:
            folder = self.work / "fixtures" / name
            folder.mkdir(parents=True)
            started = time.monotonic()
            getattr(self, name)(folder)
            self.seconds += time.monotonic() - started
            self._made[name] = folder
        shutil.copytree(self._made[name], to)
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


@dataclass(frozen=True)
class Damage:
    """One damage cell: a folder (empty, or a copy of a fixture), the damage done to it, the command a user would run
    on it, the rows that must be there after it as before, and what its message must say."""
    name: str
    expected: int
    command: Callable[[Path], list[str]]  # the cell's folder -> the command
    fixture: str | None = None  # a Fixtures method: the folder starts as a copy of what it made
    damage: Callable[[Path], Any] = lambda folder: None  # before the command; what it returns goes to `check`
    rows: Callable[[Path], set] = lambda folder: set()  # taken after the damage and after the command
    says: Callable[[Path], tuple[str, ...]] = lambda folder: ()  # in the message's last line, each
    max_lines: int = 1
    around: Callable[[Path], Any] = lambda folder: contextlib.nullcontext()  # a state held while the command runs
    launch: Callable[[Path], dict] = lambda folder: {}  # run_command's cwd, env, preexec_fn
    check: Callable[[Cell, Path, Any, list[str], list[str]], None] = lambda cell, folder, damaged, out, err: None


def damage_cell(spec: Damage, fixtures: Fixtures, work: Path) -> Cell:
    cell = Cell(spec.name, spec.expected, spec.max_lines)
    folder = fixtures.copy(spec.fixture, work) if spec.fixture else work
    folder.mkdir(parents=True, exist_ok=True)
    damaged = spec.damage(folder)
    before = spec.rows(folder)
    with spec.around(folder):
        out, err = run_command(cell, spec.command(folder), **spec.launch(folder))
    cell.rows_lost = len(before - spec.rows(folder))
    cell.checks += [f"the message does not name {word!r}" for word in spec.says(folder) if word not in cell.message]
    spec.check(cell, folder, damaged, out, err)
    return cell


def _garble_database(db: Path, damage: str) -> None:
    size = db.stat().st_size
    with db.open("r+b") as handle:
        if damage == "truncated":
            handle.truncate(size // 5)
        elif damage == "garbled header":
            handle.write(os.urandom(8192))
        else:  # past the header: the blocks that hold the rows
            handle.seek(16384)
            handle.write(os.urandom(size // 3))


def _database_rows(folder: Path) -> set:
    """The fixture's 3000 rows as long as the file is the one the damage left (unreadable: the file must stay as it
    was); all of them lost if the command changed it."""
    db = folder / "kb.duckdb"
    digest = hashlib.sha256(db.read_bytes()).digest() if db.exists() else b""
    return {(i, digest) for i in range(3000)}


def _garble_checkpoints(folder: Path, file: str) -> tuple[bool, list[Path]]:
    """The newest checkpoint's `file` garbled, or every checkpoint's JSON for `every`; (every, the files garbled)."""
    paths = dict(_rows(folder / "kb.duckdb", "SELECT step, state_path FROM checkpoints") or [])
    run = folder / "logs" / "r"
    targets = ([run / p / "kbrl_checkpoint.json" for p in paths.values()] if file == "every"
               else [run / paths[max(paths)] / file])
    for target in targets:
        data = target.read_bytes()
        target.write_bytes(data[: len(data) // 2] + b"\x00garbled")
    return file == "every", targets


def _resumed(cell: Cell, folder: Path, damaged: tuple[bool, list[Path]], _out: list[str], err: list[str]) -> None:
    """With an intact checkpoint left, `train` resumes from the newest intact one and redoes what follows; with
    none, it says so (code 5) and changes nothing."""
    (every, targets), text = damaged, "".join(err)
    if every:
        if "no intact checkpoint" not in text or targets[0].name not in text:
            cell.checks.append("the message does not say that no checkpoint is intact")
        return
    if (after := _steps(folder / "kb.duckdb", "train_steps")) != {0, 1, 2}:
        cell.checks.append(f"steps {sorted(after)} after resuming, expected 0-2")
    if f"is damaged ({targets[0]}" not in text or "newest intact one" not in text:
        cell.checks.append("no word of the damaged checkpoint and the fallback")


def _index_rows(folder: Path) -> set:
    """The index's documents and the corpus's rows (as counts: a rebuild keeps them, none may go)."""
    documents = len(json.loads((folder / "rag_index" / "index.json").read_text())["doc_sha256"])
    corpus = _count(folder / "kb.duckdb", "corpus_docs")
    return {("index", i) for i in range(documents)} | {("corpus", i) for i in range(corpus)}


def _rebuilt(cell: Cell, folder: Path, *_: Any) -> None:
    from kernelbench_rl.rag.index import index_damage

    if index_damage(folder / "rag_index") is not None:
        cell.checks.append("the index is still damaged after the rebuild")


@contextlib.contextmanager
def _immutable(folder: Path) -> Iterator[None]:
    """A folder no user can write into, root included (who ignores permission bits): `chattr +i`, else mode 555."""
    root = os.geteuid() == 0
    if root:
        subprocess.run(["chattr", "+i", str(folder)], check=True, capture_output=True)
    else:
        folder.chmod(0o555)
    try:
        yield
    finally:
        if root:
            subprocess.run(["chattr", "-i", str(folder)], check=True, capture_output=True)
        else:
            folder.chmod(0o755)


# A writer of many rows under 3 MB of file size: it prints how many it wrote before the limit stopped it.
STORE_WRITER = ("import sys\nfrom kernelbench_rl.store import Store\nfrom kernelbench_rl.errors import UserError\n"
                "store = Store(sys.argv[1])\nwritten = 0\ntry:\n    for i in range(400):\n"
                "        store.put_texts('prompt', [f'{i} {j} ' + 'y' * 300 for j in range(200)])\n"
                "        written += 200\nexcept UserError as exc:\n    print(written)\n    print(exc, file=sys.stderr)\n"
                "    sys.exit(int(exc.exit_code))\n")


def _written_rows_stored(cell: Cell, folder: Path, _damaged: Any, out: list[str], _err: list[str]) -> None:
    written = int(out[0]) if out and out[0].strip().isdigit() else 0
    cell.rows_lost = max(0, written - _count(folder / "kb.duckdb", "blobs"))
    if written == 0:
        cell.checks.append("nothing was written before the limit")


def _train_steps(folder: Path) -> set[int]:
    return _steps(folder / "kb.duckdb", "train_steps")


def _damages() -> list[Damage]:
    """Every damage cell, cheap cells first within each part."""
    commands = {"sql": lambda f: _cli("sql", "--db", str(f / "kb.duckdb"), "SELECT count(*), sum(length(text)) FROM blobs"),
                "train": lambda f: _cli("train", f"db_path={f / 'kb.duckdb'}", f"log_dir={f / 'logs'}", "run_id=r", *SHORT)}
    cells = [Damage(f"{damage} x kb.duckdb ({name})", ExitCode.DAMAGED, command, "database",
                    lambda f, d=damage: _garble_database(f / "kb.duckdb", d), _database_rows,
                    says=lambda f: (str(f / "kb.duckdb"),))
             for damage in ("truncated", "garbled header", "garbled blocks") for name, command in commands.items()]
    for file in (*CHECKPOINT_FILES, "every"):
        every = file == "every"
        cells.append(Damage(
            f"garbled x {'every' if every else 'newest'} checkpoint's {'kbrl_checkpoint.json' if every else file} (train)",
            ExitCode.DAMAGED if every else ExitCode.OK, lambda f: _train(f, 3), "trained_run",
            lambda f, x=file: _garble_checkpoints(f, x), _train_steps, max_lines=1 if every else 3, check=_resumed))
    cells.append(Damage("garbled x index.faiss (retrieve)", ExitCode.DAMAGED,
                        lambda f: _cli("retrieve", "--problem", "L1/19", "--db", str(f / "kb.duckdb"),
                                       "--index", str(f / "rag_index"), "--no-code"),
                        "index", lambda f: (f / "rag_index" / "index.faiss").write_bytes(b"garbled" * 10), _index_rows,
                        says=lambda f: (str(f / "rag_index" / "index.faiss"), "rebuild")))
    cells.append(Damage("garbled x index.faiss (index build)", ExitCode.OK,
                        lambda f: _cli("index", "build", "--db", str(f / "kb.duckdb"), "--index", str(f / "rag_index")),
                        "index", lambda f: (f / "rag_index" / "index.faiss").write_bytes(b"garbled" * 10), _index_rows,
                        check=_rebuilt))
    for holding in (False, True):
        cells.append(Damage(f"unwritable x runs/, {'holding a run' if holding else 'empty'} (train)",
                            ExitCode.UNWRITABLE, lambda f: _train(f, 3), "trained_run" if holding else None,
                            rows=_train_steps, says=lambda f: (str(f), "writable"), around=_immutable))
    cells.append(Damage("file-size limit x kb.duckdb (train)", ExitCode.DISK_FULL, lambda f: _train(f, 6), "trained_run",
                        rows=_train_steps, says=lambda f: (str(f / "kb.duckdb"), "full"),
                        launch=lambda f: {"preexec_fn": _file_size_limit((f / "kb.duckdb").stat().st_size + 131072)}))
    cells.append(Damage("file-size limit x kb.duckdb (store writes)", ExitCode.DISK_FULL,
                        lambda f: [sys.executable, "-c", STORE_WRITER, str(f / "kb.duckdb")],
                        says=lambda f: (str(f / "kb.duckdb"), "full"),
                        launch=lambda f: {"preexec_fn": _file_size_limit(3_000_000)}, check=_written_rows_stored))
    # Prefect's database at the start: `ulimit -f` on the whole command, room for our DuckDB file but not for
    # Prefect's migrations. Nothing was stored yet.
    cells.append(Damage("file-size limit x prefect.db, at the start (pipeline)", ExitCode.DISK_FULL, _pipeline,
                        damage=lambda f: Store(f / "kb.duckdb").init(),
                        says=lambda f: (str(f / "prefect" / "prefect.db"), "full"),
                        launch=lambda f: {"cwd": f, "env": _prefect_env(f), "preexec_fn": _file_size_limit(
                            (f / "kb.duckdb").stat().st_size + 256 * 1024)}))
    cells.append(Damage("free space < KBRL_MIN_FREE_MB x runs/ (train)", ExitCode.DISK_FULL, lambda f: _train(f, 3),
                        "trained_run", rows=_train_steps, says=lambda f: ("KBRL_MIN_FREE_MB",),
                        launch=lambda f: {"env": {**ENV, "KBRL_MIN_FREE_MB": str(2**40)}}))
    return cells


# -- run endings: a run killed outright, a database gone read-only, a Ctrl-C while starting, refused inputs ---------

def all_flow_run_states(prefect_db: Path) -> list[tuple[str, str]]:
    """(flow name, state type) of every flow run in the temporary API's SQLite database, oldest first."""
    if not prefect_db.exists():
        return []
    try:
        with contextlib.closing(sqlite3.connect(f"file:{prefect_db}?mode=ro", uri=True)) as db:
            return db.execute("SELECT flow.name, flow_run.state_type FROM flow_run JOIN flow ON flow.id = "
                              "flow_run.flow_id ORDER BY flow_run.created").fetchall()
    except sqlite3.Error:
        return []


def _run_row(cell: Cell, db: Path, run_id: str) -> dict[str, Any]:
    """The run's row as the next command (`sql`, a process of its own) reads it; fills the cell's exit code, message
    lines and processes left from that command."""
    out, _ = run_command(cell, _cli("sql", "--db", str(db), f"SELECT * FROM runs WHERE run_id = '{run_id}'", "--json"))
    try:
        return (json.loads("".join(out)) or [{}])[0]
    except ValueError:
        cell.checks.append("sql printed no JSON")
        return {}


def killed_cell(stage: str, work: Path) -> Cell:
    """SIGKILL to `train` or `pipeline` mid-training (the OOM killer's way): the next command (`sql`) finds the run
    crashed, saying when and how; the same command then resumes it, every step stored once; for the pipeline, the
    killed attempt's flow runs (on Prefect's temporary API, gone with it) end Crashed once the rerun's API is up. The
    cell's exit code and message are `sql`'s; its processes left, the killed command's and `sql`'s."""
    cell = Cell(f"SIGKILL x {stage}, then sql and the same {stage}", ExitCode.OK)
    work.mkdir(parents=True)
    db, logs, run_id = work / "kb.duckdb", work / "logs", "k"
    pipeline = stage == "pipeline"
    if pipeline:
        args = _cli("pipeline", "--run-id", run_id, "--db-path", str(db), "--log-dir", str(logs), "--no-index",
                    "--train-steps", "30", "sft.enabled=false", "sampling.max_tokens=16")
    else:
        args = _cli("train", "--no-progress", f"run_id={run_id}", f"db_path={db}", f"log_dir={logs}", *SHORT,
                    "training.steps=40")
    stored: set[int] = set()

    def ready(_run: Running) -> bool:
        stored.update(_steps(db, "train_steps", read_only=True))
        return len(stored) >= (1 if pipeline else 2)

    run, _ = interrupted(cell, args, ready, lambda r: r.proc.send_signal(signal.SIGKILL), "SIGKILL",
                         work if pipeline else REPO, _prefect_env(work) if pipeline else ENV, merge=pipeline)
    killed_left = run.watch.left()
    stored |= _steps(db, "train_steps")
    row = _run_row(cell, db, run_id)
    cell.processes_left = (cell.processes_left or 0) + killed_left
    if row.get("status") != "crashed" or not row.get("ended_at") or "found by `kernelbench-rl sql`" not in str(
            row.get("end_reason")):
        cell.checks.append(f"run row after the kill: {row.get('status')}, {row.get('end_reason')!r}")
    again = ([*args[:-3], str(max(stored, default=0) + 2), "sft.enabled=false", "sampling.max_tokens=16",
              "--eval-samples", "1", "--eval-max-problems", "1"] if pipeline else [*args, "--stop-after", "1"])
    done = subprocess.run(again, cwd=work if pipeline else REPO, env=_prefect_env(work) if pipeline else ENV,
                          capture_output=True, text=True, timeout=HANG_S)
    if done.returncode != 0:
        cell.checks.append(f"the same {stage} again: exit {done.returncode}: {done.stderr[-300:]!r}")
    after = _steps(db, "train_steps")
    cell.rows_lost = len(stored - after) + len(set(range(max(after, default=-1) + 1)) - after)
    if pipeline:
        # Oldest first: the killed attempt's pipeline and curriculum runs, then the rerun's.
        ours = [run for run in all_flow_run_states(work / "prefect" / "prefect.db")
                if run[0] in ("pipeline", "curriculum")]
        if ours[:2] != [("pipeline", "CRASHED"), ("curriculum", "CRASHED")] or ("pipeline", "COMPLETED") not in ours:
            cell.checks.append(f"flow runs after the rerun: {ours}")
    return cell


def read_only_mid_run(work: Path) -> Cell:
    """The database's folder made read-only while `train` runs: one sentence, code 6, the steps stored stay; the
    run's last word, which the database could not take, is written into its row by the next command once the folder
    is writable again (failed, exit code 6)."""
    cell = Cell("read-only x runs/, mid-run (train)", ExitCode.UNWRITABLE)
    folder = work / "runs"
    folder.mkdir(parents=True)
    db = folder / "kb.duckdb"
    stored: set[int] = set()
    held = contextlib.ExitStack()

    def ready(_run: Running) -> bool:
        stored.update(_steps(db, "train_steps", read_only=True))
        return bool(stored)

    try:
        run, message = interrupted(
            cell, _cli("train", "--no-progress", "run_id=ro", f"db_path={db}", f"log_dir={work / 'logs'}", *SHORT,
                       "training.steps=40"), ready, lambda _run: held.enter_context(_immutable(folder)),
            "the folder made read-only")
        _settle(cell, run, message)
    finally:
        held.close()
    cell.rows_lost = len(stored - _steps(db, "train_steps"))
    said, exit_code, lines, left = cell.message, cell.exit, cell.lines, cell.processes_left
    row = _run_row(Cell("sql", 0), db, "ro")
    cell.exit, cell.lines, cell.message, cell.processes_left = exit_code, lines, said, left
    if (row.get("status"), row.get("exit_code")) != ("failed", ExitCode.UNWRITABLE) or \
            said.removeprefix("error: ") not in str(row.get("end_reason")):
        cell.checks.append(f"run row once writable: {row.get('status')}, {row.get('exit_code')}, "
                           f"{row.get('end_reason')!r}")
    return cell


LONG_QUERY = "SELECT count(*) FROM range(20000000000) t WHERE hash(t.range) % 1000 = 7"  # a minute or more


def _maps(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/maps").read_text()
    except OSError:
        return ""


def startup_sigint(command: str, work: Path) -> Cell:
    """A terminal's Ctrl-C while the command starts: `sql` as DuckDB's library loads, `pipeline` as the interpreter it
    exec'd into imports Prefect. 130 and one line, nothing left running, nothing made."""
    cell = Cell(f"SIGINT x start ({command})", ExitCode.STOPPED)
    work.mkdir(parents=True)
    db = work / "kb.duckdb"
    Store(db).init()
    before = hashlib.sha256(db.read_bytes()).hexdigest()
    sql = command == "sql"
    marker = "_duckdb" if sql else "flows.pipeline"

    def ready(run: Running) -> bool:  # spins (the moment lasts a fraction of a second for `sql`)
        deadline = time.monotonic() + 120
        while run.proc.poll() is None and time.monotonic() < deadline:
            if marker in (_maps(run.proc.pid) if sql else _cmdline(run.proc.pid)):
                time.sleep(0 if sql else 0.3)
                return True
            time.sleep(0.005)
        return False

    args = _cli("sql", "--db", str(db), LONG_QUERY) if sql else _pipeline(work)
    run, message = interrupted(cell, args, ready, lambda r: os.killpg(r.proc.pid, signal.SIGINT), "SIGINT",
                               REPO if sql else work, ENV if sql else _prefect_env(work), merge=True)
    _settle(cell, run, message)
    if "Traceback" in "".join(message):
        cell.checks.append("a traceback")
    cell.rows_lost = int(hashlib.sha256(db.read_bytes()).hexdigest() != before)
    return cell


def _nothing_of_prefect(cell: Cell, folder: Path, *_: Any) -> None:
    if (folder / "prefect" / "prefect.db").exists() or (folder / "kb.duckdb").exists():
        cell.checks.append("Prefect's database or the DuckDB file was made: refused too late")


def _ending_damages() -> list[Damage]:
    def eval_model(folder: Path) -> list[str]:
        return _cli("eval-model", "--policy", "openai:m", "--base-url", "http://127.0.0.1:9/v1", "--db",
                    str(folder / "kb.duckdb"), "eval.device=cpu")

    return [
        Damage("no problems x --levels 11 (pipeline)", ExitCode.BAD_INPUT, lambda f: _pipeline(f, "--levels", "11"),
               says=lambda f: ("Level 11", "--levels"), launch=lambda f: {"cwd": f, "env": _prefect_env(f)},
               check=_nothing_of_prefect),
        Damage("unparsable KBRL_MIN_FREE_MB x eval-model", ExitCode.BAD_INPUT, eval_model,
               says=lambda f: ("KBRL_MIN_FREE_MB",), launch=lambda f: {"env": {**ENV, "KBRL_MIN_FREE_MB": "lots"}}),
        Damage("free space < KBRL_MIN_FREE_MB x eval-model", ExitCode.DISK_FULL, eval_model,
               says=lambda f: ("KBRL_MIN_FREE_MB",), launch=lambda f: {"env": {**ENV, "KBRL_MIN_FREE_MB": str(2**40)}}),
    ]


def ending_cells() -> list[tuple[str, Callable[[Fixtures, Path], Cell]]]:
    cells: list[tuple[str, Callable[[Fixtures, Path], Cell]]] = [
        (f"SIGKILL x {stage}, then sql and the same {stage}", lambda f, w, s=stage: killed_cell(s, w))
        for stage in ("train", "pipeline")]
    cells.append(("read-only x runs/, mid-run (train)", lambda f, w: read_only_mid_run(w)))
    cells += [(f"SIGINT x start ({command})", lambda f, w, c=command: startup_sigint(c, w))
              for command in ("sql", "pipeline")]
    return cells + [(spec.name, lambda f, w, s=spec: damage_cell(s, f, w)) for spec in _ending_damages()]


# -- clean results: content checksums, read-only outputs, the env server's requests, a model server's answers -------

def _garble_in_place(file: Path, start: int) -> None:
    """Bytes from `start` to 16 before the end replaced: the file's size and head are as they were."""
    data = bytearray(file.read_bytes())
    data[start:-16] = os.urandom(len(data) - 16 - start)
    file.write_bytes(bytes(data))


def _garble_sampler_weights(folder: Path) -> tuple[bool, list[Path]]:
    """The newest checkpoint's sampler adapter garbled past its header: safetensors still loads it."""
    paths = dict(_rows(folder / "kb.duckdb", "SELECT step, sampler_path FROM checkpoints") or [])
    target = folder / "logs" / "r" / paths[max(paths)] / "adapter_model.safetensors"
    _garble_in_place(target, 8 + int.from_bytes(target.read_bytes()[:8], "little"))
    return False, [target]


def _read_only_place(folder: Path, move: str | None = None) -> None:
    """`ro/` made (the cell's `around` makes it immutable), with the fixture's `move` file moved into it."""
    (folder / "ro").mkdir()
    if move:
        shutil.move(str(folder / move), str(folder / "ro" / move))


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _result_damages() -> list[Damage]:
    index = lambda f: f / "rag_index" / "index.faiss"  # noqa: E731
    return [
        Damage("garbled in place x index.faiss (retrieve)", ExitCode.DAMAGED,
               lambda f: _cli("retrieve", "--problem", "L1/19", "--db", str(f / "kb.duckdb"), "--index",
                              str(f / "rag_index"), "--no-code"),
               "index", lambda f: _garble_in_place(index(f), 200), _index_rows,
               says=lambda f: (str(index(f)), "checksum")),
        Damage("garbled in place x index.faiss (index build)", ExitCode.OK,
               lambda f: _cli("index", "build", "--db", str(f / "kb.duckdb"), "--index", str(f / "rag_index")),
               "index", lambda f: _garble_in_place(index(f), 200), _index_rows, check=_rebuilt),
        Damage("garbled in place x newest checkpoint's sampler weights (train)", ExitCode.OK, lambda f: _train(f, 3),
               "trained_run", _garble_sampler_weights, _train_steps, max_lines=3, check=_resumed),
        Damage("unwritable x export --out (export)", ExitCode.UNWRITABLE,
               lambda f: _cli("export", "--db", str(f / "kb.duckdb"), "--out", str(f / "ro" / "out")), "trained_run",
               _read_only_place, _train_steps, says=lambda f: (str(f / "ro" / "out"), "writable"),
               around=lambda f: _immutable(f / "ro")),
        Damage("unwritable x the database (env serve)", ExitCode.UNWRITABLE,
               lambda f: _cli("env", "serve", "--device", "cpu", "--db", str(f / "ro" / "kb.duckdb"), "--port",
                              str(_free_port()), "problems.levels=[1]"),
               "database", lambda f: _read_only_place(f, "kb.duckdb"), lambda f: _database_rows(f / "ro"),
               says=lambda f: (str(f / "ro" / "kb.duckdb"),), around=lambda f: _immutable(f / "ro")),
    ]


@contextlib.contextmanager
def _chat_server(log: Path, port: int, **settings: str) -> Iterator[str]:
    """tests/chat_server.py (a fake OpenAI-compatible server) in a process of its own; its URL."""
    import httpx

    env = {**ENV, "CHAT_SERVER_PLAIN": "1", "CHAT_SERVER_ONLY_PROSE": "1",
           **{f"CHAT_SERVER_{k}": v for k, v in settings.items()}}
    with log.open("a") as out:
        proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--app-dir", str(REPO / "tests"), "chat_server:app",
                                 "--port", str(port), "--log-level", "warning"], cwd=REPO, env=env, stdout=out,
                                stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                httpx.get(f"{url}/stats", timeout=2)
                break
            except httpx.HTTPError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"the chat server did not start: {log.read_text()[-1000:]}") from None
                time.sleep(0.3)
        yield url
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def bad_answers_cell(kind: str, work: Path) -> Cell:
    """A model server answering 200s that are no chat completion: for `choices`, L1/1's answers lack `choices`, and
    eval-model ends partial (code 3), L1/1 without a verdict and the rows it got kept; the same command on a server
    that answers then sends only L1/1's requests. For `models`, GET /models answers an HTML page: code 3 at once,
    nothing sent."""
    import httpx

    choices = kind == "choices"
    cell = Cell(f"{'no choices in 200s' if choices else 'HTML for GET /models'} x eval-model", ExitCode.BUSY,
                max_lines=2 if choices else 1)  # partial: the unjudged samples' line and the error's
    work.mkdir(parents=True)
    db, port = work / "kb.duckdb", _free_port()
    command = _cli("eval-model", "--policy", "openai:canned", "--base-url", f"http://127.0.0.1:{port}/v1", "--samples",
                   "2", "--split", "train", "--max-problems", "2", "--db", str(db), "--run-id", "api", "--timeout", "5",
                   "--retries", "1", "problems.levels=[1]", "eval.device=cpu", "eval.correctness_trials=1")
    env = {k: v for k, v in ENV.items() if k != "OPENAI_API_KEY"}
    bad = {"MALFORMED": "nochoices", "MALFORMED_PROBLEMS": "L1/1"} if choices else {"MODELS_HTML": "1"}
    with _chat_server(work / "chat.log", port, **bad) as url:
        run_command(cell, command, env=env)
        sent = httpx.get(f"{url}/stats").json().get("requests", 0)
    answered = {r for r in _rows(db, "SELECT problem_id, sample_index FROM model_answers") or []}
    if not choices:
        cell.rows_lost = 0
        if sent:
            cell.checks.append(f"{sent} request(s) sent after GET /models answered HTML")
        if "not a model listing" not in cell.message:
            cell.checks.append("the message does not say GET /models answered no model listing")
        return cell
    if "the report above is partial" not in cell.message:
        cell.checks.append("the message does not say the report is partial")
    if len(answered) != 2 or "L1/1" in {p for p, _ in answered}:
        cell.checks.append(f"answers stored: {sorted(answered)}, expected the two of the problem that got answers")
    with _chat_server(work / "chat.log", port) as url:
        again = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=HANG_S)
        served = httpx.get(f"{url}/stats").json().get("served", {})
    if again.returncode != 0 or served != {"L1/1": 2}:
        cell.checks.append(f"the rerun: exit {again.returncode}, sent {served} (expected L1/1's two only)")
    cell.rows_lost = len(answered - {r for r in _rows(db, "SELECT problem_id, sample_index FROM model_answers") or []})
    return cell


def env_requests_cell(work: Path) -> Cell:
    """`env serve --max-open-episodes 4` given bad requests over HTTP and its WebSocket (kernrl's transport): four
    steps whose code holds a lone surrogate get the HTTP path's 422 in an error frame and leave every turn; a
    5,000-digit problem id is a 422, not a 500; a fifth reset closes the episode idle the longest. SIGTERM then ends
    the server (code 0); the row of the step it judged is there."""
    import httpx
    from websockets.sync.client import connect

    cell = Cell("bad requests x env serve (HTTP and WebSocket)", ExitCode.OK)
    work.mkdir(parents=True)
    db, port = work / "env.duckdb", _free_port()
    url = f"http://127.0.0.1:{port}"
    args = _cli("env", "serve", "--device", "cpu", "--db", str(db), "--port", str(port), "--max-turns", "3",
                "--max-open-episodes", "4", "problems.levels=[1]", "eval.correctness_trials=1")
    with launched(args) as run:
        deadline = time.monotonic() + 300
        while True:
            try:
                httpx.get(f"{url}/health", timeout=2)
                break
            except httpx.HTTPError:
                if run.proc.poll() is not None or time.monotonic() > deadline:
                    cell.checks.append("the server did not start")
                    break
                time.sleep(0.3)
        if not cell.checks:
            first = httpx.post(f"{url}/reset", json={"problem_id": "L1/19"}, timeout=60).json()["observation"]
            judged = httpx.post(f"{url}/step", json={"action": {"code": "No kernel today."},
                                                     "episode_id": first["episode_id"]}, timeout=300)
            long_id = httpx.post(f"{url}/reset", json={"problem_id": "L1/" + "9" * 5000}, timeout=60)
            if judged.status_code != 200 or long_id.status_code != 422:
                cell.checks.append(f"HTTP: a step {judged.status_code}, a 5,000-digit id {long_id.status_code}")
            with connect(f"ws://127.0.0.1:{port}/ws", open_timeout=60) as ws:
                ws.send(json.dumps({"type": "reset", "data": {"problem_id": "L1/19"}}))
                ws.recv(timeout=60)
                statuses = []
                for _ in range(4):
                    ws.send('{"type": "step", "data": {"code": "import torch\\ud800"}}')
                    statuses.append(json.loads(ws.recv(timeout=60)).get("data", {}).get("status"))
                ws.send(json.dumps({"type": "state"}))
                turns = json.loads(ws.recv(timeout=60))["data"]["step_count"]
            if statuses != [422] * 4 or turns != 0:
                cell.checks.append(f"WebSocket: surrogate steps answered {statuses}, {turns} turn(s) used")
            for _ in range(4):
                httpx.post(f"{url}/reset", json={}, timeout=60)
            state = httpx.get(f"{url}/state", params={"episode_id": first["episode_id"]}, timeout=60).json()
            if state.get("end_reason") != "evicted":
                cell.checks.append(f"the episode idle the longest: {state.get('end_reason')}, not evicted")
        stored = {r for r in _rows(db, "SELECT step, turn FROM rollouts", read_only=True) or []}
        run.proc.send_signal(signal.SIGTERM)
        _wait(cell, run.proc, "SIGTERM")
    _settle(cell, run, run.err.done())
    cell.rows_lost = len(stored - {r for r in _rows(db, "SELECT step, turn FROM rollouts") or []})
    if not stored:
        cell.checks.append("no row of the judged step")
    return cell


def result_cells() -> list[tuple[str, Callable[[Fixtures, Path], Cell]]]:
    cells: list[tuple[str, Callable[[Fixtures, Path], Cell]]] = [
        (spec.name, lambda f, w, s=spec: damage_cell(s, f, w)) for spec in _result_damages()]
    cells.append(("bad requests x env serve (HTTP and WebSocket)", lambda f, w: env_requests_cell(w)))
    cells += [(f"{'no choices in 200s' if kind == 'choices' else 'HTML for GET /models'} x eval-model",
               lambda f, w, k=kind: bad_answers_cell(k, w)) for kind in ("choices", "models")]
    return cells


# -- the matrix ---------------------------------------------------------------------------------------------------

def matrix() -> list[tuple[str, Callable[[Fixtures, Path], Cell]]]:
    """Every cell's name and how to run it (in a folder of its own), in the order they run."""
    cells: list[tuple[str, Callable[[Fixtures, Path], Cell]]] = [
        (f"{signum.name} x {stage}", lambda f, w, s=stage, n=signum: stop_cell(s, n, w))
        for stage in ("sft", "train", "pipeline") for signum in (signal.SIGINT, signal.SIGTERM)]
    cells += [(spec.name, lambda f, w, s=spec: damage_cell(s, f, w)) for spec in _damages()]
    cells.insert(-1, ("file-size limit x prefect.db, mid-run (pipeline)", lambda f, w: prefect_limit_mid_run(w)))
    cells += ending_cells()
    cells += result_cells()
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
        cell.name = name  # as --only matched it
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


def run(args: argparse.Namespace) -> int:
    cells = select(args.only.split(","))
    if args.list:
        harness.say("\n".join(name for name, _ in cells))
        return 0
    if not cells:
        raise harness.BadInput(f"--only {args.only!r} names no cell; --list prints their names.")
    become_subreaper()
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="kbrl-faults-"))
    work.mkdir(parents=True, exist_ok=True)
    started, load = time.monotonic(), os.getloadavg()
    harness.say(f"{len(cells)} cells in {work} (load average {load[0]:.1f}, {os.cpu_count()} CPUs)")
    try:
        results = run_matrix(cells, work, progress=lambda c: harness.say(
            f"{c.name}: exit {c.exit}, rows lost {c.rows_lost}, processes left {c.processes_left}, "
            f"{c.lines} lines, {c.seconds:.0f} s{'' if c.ok else ' -- ' + '; '.join(c.failures())}"))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    wall = time.monotonic() - started
    failed = sum(not c.ok for c in results)
    harness.say(f"\n{markdown_table(results)}\n\n{len(results) - failed} of {len(results)} cells hold; {wall:.0f} s")
    harness.write_json(args.out, {
        "machine": platform.platform(), "cpus": os.cpu_count(), "load_before": load, "load_after": os.getloadavg(),
        "wall_s": round(wall, 1), "subreaper": SUBREAPER,
        "cells": [{**asdict(c), "ok": c.ok, "failures": c.failures()} for c in results]})
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", default="", help="comma-separated parts of cell names (e.g. 'SIGTERM,index.faiss')")
    parser.add_argument("--out", default="", help="JSON report path")
    parser.add_argument("--list", action="store_true", help="print the cells' names and exit")
    parser.add_argument("--keep", default="", help="work in this folder and keep it (default: a temporary one)")
    return harness.run_main(run, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
