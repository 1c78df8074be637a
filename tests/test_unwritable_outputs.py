"""Commands that write check that they can before they start work: an export folder, a DuckDB file or an index folder
in a place no one may write (an immutable folder, `chattr +i`, which stops root too; or a path under a file) is one
sentence naming it with exit code 6, never a traceback after the work nor a server answering 500 to every step."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelbench_rl.errors import ExitCode
from kernelbench_rl.store import Store

REPO = Path(__file__).resolve().parents[1]
ENV = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"PYTHONPATH": str(REPO)}


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", *args], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=600)


@contextlib.contextmanager
def immutable(folder: Path) -> Iterator[Path]:
    """A folder no user can write into, root included (who ignores permission bits): `chattr +i`, else mode 555."""
    folder.mkdir(parents=True, exist_ok=True)
    root = os.geteuid() == 0
    if root and shutil.which("chattr") is None:
        pytest.skip("root without chattr: no folder it cannot write")
    if root and subprocess.run(["chattr", "+i", str(folder)], capture_output=True).returncode != 0:
        pytest.skip("root on a file system without chattr +i: no folder it cannot write")
    if not root:
        folder.chmod(0o555)
    try:
        yield folder
    finally:
        if root:
            subprocess.run(["chattr", "-i", str(folder)], check=True)
        folder.chmod(0o755)


def _refused(done: subprocess.CompletedProcess, path: Path) -> str:
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr[-3000:]
    assert done.returncode == ExitCode.UNWRITABLE, lines[0]
    assert str(path) in lines[0]
    return lines[0]


@pytest.fixture(scope="module")
def recorded(tmp_path_factory) -> Path:
    """A DuckDB file with one recorded episode of the environment (a format failure: no evaluation worker)."""
    from kernelbench_rl.envs.kernel_env import EnvSpec
    from kernelbench_rl.integrations.openenv_env import KernelAction, KernelEnvService
    from kernelbench_rl.problems import get_problem

    from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult

    db = tmp_path_factory.mktemp("recorded") / "kb.duckdb"
    store = Store(db)
    store.init()

    class FormatOnly:  # the verdict of an answer without code (the evaluator's own, without a worker)
        def evaluate_responses(self, problem_ids, responses):
            return [EvalResult(problem_id=p, candidate_sha256="", backend="triton", precision="fp32", device_kind="cpu",
                               error_category=ErrorCategory.FORMAT, error_message="no code block") for p in problem_ids]

    service = KernelEnvService(FormatOnly(), [get_problem("L1/19")], [], spec=EnvSpec(turns=1), store=store,
                               run_id="env-run")
    episode = service.reset(problem_id="L1/19").episode_id
    service.step(KernelAction(code="I am not able to write this kernel."), episode)
    assert store.fetchall("SELECT count(*) FROM rollouts") == [(1,)]
    return db


def test_export_into_a_read_only_folder_is_one_sentence_exit_6(recorded: Path, tmp_path: Path) -> None:
    with immutable(tmp_path / "ro") as ro:
        done = _cli("export", "--db", str(recorded), "--out", str(ro / "trajectories"))
        line = _refused(done, ro / "trajectories")
        assert "writable" in line
        under_a_file = recorded.parent / "kb.duckdb" / "out"
        _refused(_cli("export", "--db", str(recorded), "--out", str(under_a_file)), under_a_file)
    assert not (ro / "trajectories").exists()


def test_env_serve_refuses_a_database_it_cannot_write(recorded: Path, tmp_path: Path) -> None:
    ro = tmp_path / "ro"
    ro.mkdir()
    shutil.copy(recorded, ro / "kb.duckdb")  # the file itself may be written; its folder (log, lock files) may not
    with immutable(ro):
        done = _cli("env", "serve", "--device", "cpu", "--db", str(ro / "kb.duckdb"), "--port", "1", "problems.levels=[1]")
        _refused(done, ro / "kb.duckdb")


@pytest.mark.parametrize("command", ["corpus ingest", "corpus verify", "index build", "eval-model"])
def test_commands_writing_the_database_refuse_an_unwritable_one_before_work(tmp_path: Path, command: str) -> None:
    with immutable(tmp_path / "ro") as ro:
        db = ro / "kb.duckdb"
        extra = (["--policy", "openai:m", "--base-url", "http://127.0.0.1:9/v1", "eval.device=cpu"]
                 if command == "eval-model" else [])
        done = _cli(*command.split(), "--db", str(db), *extra)
        _refused(done, db)  # eval-model: before the server (unreachable: code 3) is asked


def test_index_build_refuses_an_index_folder_it_cannot_write(recorded: Path, tmp_path: Path) -> None:
    with immutable(tmp_path / "ro") as ro:
        done = _cli("index", "build", "--db", str(recorded), "--index", str(ro / "rag_index"))
        _refused(done, ro / "rag_index")


def test_the_check_writes_nothing_where_it_may_write(tmp_path: Path) -> None:
    from kernelbench_rl.writable import check_writable_file, check_writable_folder

    check_writable_folder(tmp_path / "a" / "b", "the export folder")
    check_writable_file(tmp_path / "c" / "kb.duckdb", "the database")
    (tmp_path / "kb.duckdb").write_bytes(b"x")
    check_writable_file(tmp_path / "kb.duckdb", "the database")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["kb.duckdb"]
    assert (tmp_path / "kb.duckdb").read_bytes() == b"x"
