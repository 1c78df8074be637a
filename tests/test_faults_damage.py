"""Damaged state met with one sentence and a fallback (real damaged files, a real size limit, a real unwritable
folder): a damaged DuckDB file, checkpoint or index, an unwritable folder and a full disk each name the file, say
what is wrong and what to do, with their own exit code; a damaged newest checkpoint falls back to the newest intact
one; checkpoint paths are stored relative to the run's folder, so a copied runs/ resumes from the copy."""

from __future__ import annotations

import os
import resource
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from kernelbench_rl.errors import ExitCode
from kernelbench_rl.store import Store

REPO = Path(__file__).resolve().parents[1]
ENV = {**os.environ, "PYTHONPATH": str(REPO)}
TINY = ["policy.backend=local", "policy.base_model=local:tiny", "policy.lora_rank=4", "problems.levels=[1]",
        "problems.ids=[L1/19,L1/21]", "rag.enabled=false", "eval.device=cpu", "sft.enabled=false",
        "training.batch_problems=2", "sampling.group_size=2", "sampling.max_tokens=8", "rewards.truncated=keep",
        "training.checkpoint_every=1", "training.max_steps_off_policy=0"]


def _cli(*args: str, cwd: Path = REPO, env: dict | None = None, preexec_fn=None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", *args], cwd=cwd, env=env or ENV,
                          capture_output=True, text=True, timeout=1200, preexec_fn=preexec_fn)


def _one_sentence(done: subprocess.CompletedProcess) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    return lines[0]


def _database(path: Path) -> None:
    store = Store(path)
    store.put_texts("prompt", [f"prompt {i} " + "x" * 200 for i in range(3000)])


@pytest.mark.parametrize("damage", ["truncated", "garbled header", "garbled blocks"])
def test_a_damaged_database_is_one_sentence_naming_it(tmp_path: Path, damage: str) -> None:
    db = tmp_path / "kb.duckdb"
    _database(db)
    size = db.stat().st_size
    with db.open("r+b") as handle:
        if damage == "truncated":
            handle.truncate(size // 5)
        elif damage == "garbled header":
            handle.write(os.urandom(8192))
        else:
            handle.seek(16384)  # past the header: the blocks that hold the rows
            handle.write(os.urandom(size // 3))
    for done in (_cli("sql", "--db", str(db), "SELECT count(*), sum(length(text)) FROM blobs"),
                 _cli("train", f"db_path={db}", f"log_dir={tmp_path / 'logs'}", "run_id=r", *TINY)):
        line = _one_sentence(done)
        assert done.returncode == ExitCode.DAMAGED, line
        assert str(db) in line and "damaged" in line and "move it aside" in line


def test_a_write_past_a_file_size_limit_is_an_error_naming_the_file_and_loses_no_row(tmp_path: Path) -> None:
    """`ulimit -f`: DuckDB's log write, or its silent failure to fold the log into the file, is an error (exit 0
    before, the file stuck at the limit); every row it reported as written is still there afterwards."""
    db = tmp_path / "kb.duckdb"
    code = ("import sys\nfrom kernelbench_rl.store import Store\nfrom kernelbench_rl.errors import UserError\n"
            f"store = Store({str(db)!r})\nwritten = 0\ntry:\n    for i in range(400):\n"
            "        store.put_texts('prompt', [f'{i} {j} ' + 'y' * 300 for j in range(200)])\n        written += 200\n"
            "except UserError as exc:\n    print(written)\n    print(exc, file=sys.stderr)\n"
            "    sys.exit(int(exc.exit_code))\n")

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (3_000_000, 3_000_000))

    done = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=600,
                          preexec_fn=limit)
    line = _one_sentence(done)
    assert done.returncode == ExitCode.DISK_FULL, line
    assert str(db) in line and "full" in line
    written = int(done.stdout.strip())
    assert written > 0
    assert Store(db).count("blobs") >= written  # with room again, the log folds in: nothing reported is lost


def test_too_little_free_space_stops_a_run_before_it_starts(tmp_path: Path) -> None:
    done = _cli("train", f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", "run_id=r", *TINY,
                env={**ENV, "KBRL_MIN_FREE_MB": str(2**40)})
    line = _one_sentence(done)
    assert done.returncode == ExitCode.DISK_FULL and "KBRL_MIN_FREE_MB" in line and "free" in line


def test_an_unwritable_runs_folder_is_one_sentence_naming_it(tmp_path: Path) -> None:
    """An immutable folder (`chattr +i`): no user can write into it, root included (who ignores permission bits)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    if os.geteuid() != 0:
        runs.chmod(0o555)
    elif subprocess.run(["chattr", "+i", str(runs)], capture_output=True).returncode != 0:
        pytest.skip("root without chattr +i: no folder it cannot write")
    try:
        done = _cli("train", f"db_path={runs / 'kb.duckdb'}", f"log_dir={runs / 'logs'}", "run_id=r", *TINY)
    finally:
        if os.geteuid() == 0:
            subprocess.run(["chattr", "-i", str(runs)], check=True)
        runs.chmod(0o755)
    line = _one_sentence(done)
    assert done.returncode == ExitCode.UNWRITABLE, line
    assert str(runs) in line and "writable" in line


def _train(tmp: Path, steps: int, *extra: str) -> subprocess.CompletedProcess:
    return _cli("train", "--no-progress", f"db_path={tmp / 'runs' / 'kb.duckdb'}", f"log_dir={tmp / 'runs' / 'logs'}",
                "run_id=r", *TINY, f"training.steps={steps}", *extra)


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory) -> Path:
    """A run of two steps with a checkpoint each, trained once for the file; each test damages its own copy."""
    folder = tmp_path_factory.mktemp("two-steps")
    first = _train(folder, 2)
    assert first.returncode == 0, first.stderr[-3000:]
    return folder / "runs"


@pytest.mark.parametrize("file", ["adapter_model.safetensors", "optimizer.pt", "kbrl_checkpoint.json"])
def test_a_damaged_newest_checkpoint_falls_back_to_the_newest_intact_one(tmp_path: Path, file: str,
                                                                          two_steps: Path) -> None:
    shutil.copytree(two_steps, tmp_path / "runs")
    store = Store(tmp_path / "runs" / "kb.duckdb")
    paths = dict(store.fetchall("SELECT step, state_path FROM checkpoints"))
    assert sorted(paths) == [0, 1] and not any(Path(p).is_absolute() for p in paths.values())
    damaged = tmp_path / "runs" / "logs" / "r" / paths[1] / file
    data = damaged.read_bytes()
    damaged.write_bytes(data[: len(data) // 2] + b"\x00garbled")
    second = _train(tmp_path, 3)
    assert second.returncode == 0, second.stderr[-3000:]
    assert f"the checkpoint of step 1 is damaged ({damaged}" in second.stderr
    assert "resuming from checkpoint step 0, the newest intact one" in second.stderr
    assert [r[0] for r in store.fetchall("SELECT step FROM train_steps ORDER BY step")] == [0, 1, 2]
    assert [r[0] for r in store.fetchall("SELECT step FROM checkpoints ORDER BY step")] == [0, 1, 2]

    # Every checkpoint damaged: one sentence naming the newest one's file, and code 5.
    for step, path in store.fetchall("SELECT step, state_path FROM checkpoints"):
        target = tmp_path / "runs" / "logs" / "r" / path / "kbrl_checkpoint.json"
        target.write_text("{not json")
    third = _train(tmp_path, 4)
    assert third.returncode == ExitCode.DAMAGED, third.stderr[-3000:]
    line = third.stderr.strip().splitlines()[-1]
    assert "Traceback" not in third.stderr and "no intact checkpoint" in line and "kbrl_checkpoint.json" in line


def test_a_copied_runs_folder_resumes_from_the_copy(tmp_path: Path) -> None:
    original, copy = tmp_path / "a", tmp_path / "b"
    done = _train(original, 1)
    assert done.returncode == 0, done.stderr[-3000:]
    shutil.copytree(original / "runs", copy / "runs")
    shutil.rmtree(original)  # the original is gone: only the copy's files can be read
    resumed = _train(copy, 2)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    store = Store(copy / "runs" / "kb.duckdb")
    assert [r[0] for r in store.fetchall("SELECT step FROM train_steps ORDER BY step")] == [0, 1]
    assert "resumed after step 0" in resumed.stdout


def test_a_damaged_index_is_named_and_the_pipeline_rebuilds_it(tmp_path: Path) -> None:
    from kernelbench_rl.rag.index import IndexDamagedError, build_index, index_damage, load_index, save_index

    vectors = np.random.default_rng(0).normal(size=(40, 8)).astype(np.float32)
    folder = save_index(build_index([f"{i:064x}" for i in range(40)], vectors, model_id="test-model", kind="flat"),
                        tmp_path / "rag_index")
    assert index_damage(folder) is None
    (folder / "index.faiss").write_bytes(b"garbled" * 10)
    with pytest.raises(IndexDamagedError) as err:
        load_index(folder)
    assert str(folder / "index.faiss") in str(err.value) and "rebuild" in str(err.value)
    assert err.value.exit_code == ExitCode.DAMAGED
    assert str(folder / "index.faiss") in index_damage(folder)  # what ensure_index checks before keeping an index
