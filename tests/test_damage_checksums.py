"""Damage that leaves a file's size as it was (bytes garbled in place, the file still loadable) is found by the
checksum written when the file was made: a retrieval index's vectors (`retrieve` says so in one sentence with code 5,
`index build` rebuilds it) and a checkpoint's files, its sampler weights included (`train` passes it over for the one
before it). Real FAISS indexes, a real training run on the CPU, real DuckDB files."""

from __future__ import annotations

import json
import os
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


def _cli(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", *args], cwd=REPO, env=ENV, capture_output=True,
                          text=True, timeout=1200)


def _garble_in_place(file: Path, start: int) -> None:
    """Every byte from `start` to 16 bytes before the end replaced: the size and the head are as they were."""
    data = bytearray(file.read_bytes())
    rng = np.random.default_rng(7)
    data[start:-16] = rng.integers(0, 256, size=len(data) - 16 - start, dtype=np.uint8).tobytes()
    file.write_bytes(bytes(data))


def test_an_index_garbled_in_place_is_damaged_not_searched(tmp_path: Path) -> None:
    from kernelbench_rl.rag.index import IndexDamagedError, build_index, index_damage, load_index, save_index

    vectors = np.random.default_rng(0).normal(size=(60, 16)).astype(np.float32)
    for kind in ("flat", "hnsw"):
        folder = save_index(build_index([f"{i:064x}" for i in range(60)], vectors, model_id="m", kind=kind),
                            tmp_path / kind)
        assert load_index(folder).size == 60 and index_damage(folder) is None
        faiss_file = folder / "index.faiss"
        size = faiss_file.stat().st_size
        _garble_in_place(faiss_file, 200)
        assert faiss_file.stat().st_size == size
        with pytest.raises(IndexDamagedError) as err:
            load_index(folder)
        assert err.value.exit_code == ExitCode.DAMAGED
        message = str(err.value)
        assert str(faiss_file) in message and "checksum" in message and "rebuild" in message
        assert len(message.splitlines()) == 1
        assert str(faiss_file) in index_damage(folder)  # what the pipeline checks before keeping an index

    # The sidecar's document list changed (a key garbled in place): its corpus hash no longer matches.
    folder = tmp_path / "flat"
    save_index(build_index([f"{i:064x}" for i in range(60)], vectors, model_id="m", kind="flat"), folder)
    meta = json.loads((folder / "index.json").read_text())
    meta["doc_sha256"][3] = "f" * 64
    (folder / "index.json").write_text(json.dumps(meta))
    with pytest.raises(IndexDamagedError, match="corpus hash"):
        load_index(folder)


def test_retrieve_on_a_garbled_index_is_code_5_and_index_build_rebuilds_it(tmp_path: Path) -> None:
    from kernelbench_rl.rag.corpus import ingest_docs, load_source
    from kernelbench_rl.rag.index import index_damage

    db, index = tmp_path / "kb.duckdb", tmp_path / "rag_index"
    ingest_docs(Store(db), load_source("solutions", None, None))
    built = _cli("index", "build", "--db", str(db), "--index", str(index))
    assert built.returncode == 0, built.stderr[-3000:]
    _garble_in_place(index / "index.faiss", 200)
    done = _cli("retrieve", "--problem", "L1/19", "--db", str(db), "--index", str(index), "--no-code")
    assert done.returncode == ExitCode.DAMAGED, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert str(index / "index.faiss") in line and "checksum" in line and "index build" in line
    rebuilt = _cli("index", "build", "--db", str(db), "--index", str(index))
    assert rebuilt.returncode == 0, rebuilt.stderr[-3000:]
    assert index_damage(index) is None


def _train(folder: Path, steps: int) -> subprocess.CompletedProcess:
    return _cli("train", "--no-progress", f"db_path={folder / 'kb.duckdb'}", f"log_dir={folder / 'logs'}", "run_id=r",
                *TINY, f"training.steps={steps}")


@pytest.fixture(scope="module")
def two_steps(tmp_path_factory) -> Path:
    """A run of two steps with a checkpoint after each; each test garbles its own copy."""
    folder = tmp_path_factory.mktemp("two-steps")
    done = _train(folder, 2)
    assert done.returncode == 0, done.stderr[-3000:]
    return folder


def _checkpoint_folders(folder: Path, step: int) -> tuple[Path, Path]:
    (state, sampler), = Store(folder / "kb.duckdb").fetchall(
        "SELECT state_path, sampler_path FROM checkpoints WHERE step = ?", [step])
    return folder / "logs" / "r" / state, folder / "logs" / "r" / sampler


def test_every_checkpoint_folder_carries_the_checksums_of_its_files(two_steps: Path) -> None:
    from kernelbench_rl.training.checkpoints import damage

    for step in (0, 1):
        for path, optimizer in zip(_checkpoint_folders(two_steps, step), (True, False)):
            sums = json.loads((path / "kbrl_checksums.json").read_text())["sha256"]
            assert {"kbrl_checkpoint.json", "adapter_config.json", "adapter_model.safetensors"} <= set(sums)
            assert ("optimizer.pt" in sums) == optimizer
            assert damage(str(path), optimizer=optimizer) is None


@pytest.mark.parametrize("which", ["sampler", "state"])
def test_a_checkpoint_garbled_in_place_falls_back_to_the_one_before_it(tmp_path: Path, two_steps: Path,
                                                                      which: str) -> None:
    """The adapter's tensors garbled past their header: safetensors still loads them, the checksum does not agree."""
    shutil.copytree(two_steps, tmp_path / "run")
    folder = tmp_path / "run"
    state, sampler = _checkpoint_folders(folder, 1)
    target = (sampler if which == "sampler" else state) / "adapter_model.safetensors"
    from safetensors.torch import load_file

    header = 8 + int.from_bytes(target.read_bytes()[:8], "little")
    _garble_in_place(target, header)
    load_file(str(target))  # still loads: only the checksum can tell
    done = _train(folder, 3)
    assert done.returncode == 0, done.stderr[-3000:]
    assert f"the checkpoint of step 1 is damaged ({target} does not match its checksum" in done.stderr
    assert "resuming from checkpoint step 0, the newest intact one" in done.stderr
    store = Store(folder / "kb.duckdb")
    assert [r[0] for r in store.fetchall("SELECT step FROM train_steps ORDER BY step")] == [0, 1, 2]
    from kernelbench_rl.training.checkpoints import damage

    state, sampler = _checkpoint_folders(folder, 1)  # step 1 redone: its new folders are whole and sealed
    assert damage(str(state), optimizer=True) is None and damage(str(sampler), optimizer=False) is None


def test_a_checkpoint_whose_sampler_is_garbled_is_not_evaluated(tmp_path: Path, two_steps: Path) -> None:
    """Checkpoint evaluation loads the sampler weights, so it checks them first, checksum included: one sentence naming
    the file (code 5), not an evaluation of garbled weights."""
    shutil.copytree(two_steps, tmp_path / "run")
    folder = tmp_path / "run"
    _state, sampler = _checkpoint_folders(folder, 1)
    target = sampler / "adapter_model.safetensors"
    _garble_in_place(target, 8 + int.from_bytes(target.read_bytes()[:8], "little"))
    from kernelbench_rl.config import load_config
    from kernelbench_rl.training.checkpoint_eval import CheckpointSampler
    from kernelbench_rl.training.checkpoints import CheckpointDamagedError

    cfg = load_config("default", TINY)
    row_name = Store(folder / "kb.duckdb").fetchall("SELECT name FROM checkpoints WHERE step = 1")[0][0]
    sampler_of = CheckpointSampler("r", folder / "logs" / "r", cfg.policy.base_model, cfg.policy, cfg.sampling,
                                   row_name)
    with pytest.raises(CheckpointDamagedError, match="does not match its checksum") as raised:
        sampler_of.settle(Store(folder / "kb.duckdb"), "eval-1")
    assert str(target) in str(raised.value) and raised.value.exit_code == ExitCode.DAMAGED
