"""Checkpoint rows and files: where a run's saved states live, whether they are intact, and which one to resume.

- **Paths** of local checkpoints are stored relative to the run's folder (`<log_dir>/<run_id>`), so a
  copied or moved `runs/` resumes from the copy's files; Tinker's `tinker://` paths are stored as given.
  Rows written before this rule (absolute paths) are read as they are.
- **Integrity**: a local checkpoint is a folder with `kbrl_checkpoint.json`, a peft adapter
  (`adapter_config.json`, `adapter_model.safetensors`) and, for a training state, `optimizer.pt`.
  `damage()` reads each of them back and says what is wrong in a few words. Each folder also carries
  `kbrl_checksums.json`, the sha256 of every file in it, written as the save ends (`saving()`), so
  bytes garbled in place (a file's size unchanged, still loadable) are found too; the state's folder
  and the sampler weights' folder alike. A folder saved before checksums were kept (its
  `kbrl_checkpoint.json` does not name the checksum file) is read as it is.
- **Resume**: `newest_intact()` walks a run's checkpoints newest first and returns the first intact
  one, saying which ones it passed over and why; when none is intact it raises `CheckpointDamagedError`
  (exit code 5) naming the newest one's damaged file.
- **Writes**: a save that fails for want of space or permission is `DiskFullError` / `UnwritableError`
  naming the folder; free space is checked after each checkpoint.
"""

from __future__ import annotations

import hashlib
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from kernelbench_rl.store.files import DamagedFileError, DiskFullError, check_free_space, write_error

META_FILE = "kbrl_checkpoint.json"
ADAPTER_CONFIG = "adapter_config.json"
ADAPTER_WEIGHTS = "adapter_model.safetensors"
OPTIMIZER_FILE = "optimizer.pt"
CHECKSUM_FILE = "kbrl_checksums.json"


class CheckpointDamagedError(DamagedFileError):
    """No intact checkpoint is left to resume a run from."""


def is_remote(path: str) -> bool:
    return "://" in path


def stored_path(path: str | None, run_dir: Path) -> str | None:
    """What a checkpoint row keeps: a path inside the run's folder relative to it, anything else as given."""
    if path is None or is_remote(path):
        return path
    try:
        return str(Path(path).resolve().relative_to(run_dir.resolve()))
    except ValueError:
        return path


def resolved_path(path: str | None, run_dir: Path) -> str | None:
    """A checkpoint row's path as the policy backend opens it: relative ones under the run's folder, here."""
    if path is None or is_remote(path) or Path(path).is_absolute():
        return path
    return str((run_dir / path).resolve())


def damage(path: str, *, optimizer: bool) -> str | None:
    """What is wrong with a local checkpoint folder, in a few words naming the file (None: intact, or remote)."""
    if is_remote(path):
        return None
    folder = Path(path)
    if not folder.is_dir():
        return f"{folder} is missing"
    meta: dict[str, Any] = {}
    for name in (META_FILE, ADAPTER_CONFIG):
        file = folder / name
        try:
            data = json.loads(file.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return f"{file} is missing"
        except (OSError, UnicodeDecodeError, ValueError) as exc:
            return f"{file} is not valid JSON ({_short(exc)})"
        if not isinstance(data, dict) or (name == META_FILE and "base_model" not in data):
            return f"{file} does not describe a checkpoint"
        meta = data if name == META_FILE else meta
    weights = folder / ADAPTER_WEIGHTS
    try:
        from safetensors.torch import load_file

        load_file(str(weights), device="cpu")
    except FileNotFoundError:
        return f"{weights} is missing"
    except Exception as exc:  # noqa: BLE001 - safetensors raises its own types for a truncated or garbled file
        return f"{weights} cannot be read ({_short(exc)})"
    if optimizer:
        state = folder / OPTIMIZER_FILE
        try:
            import torch

            loaded = torch.load(state, map_location="cpu", weights_only=True)
            if not isinstance(loaded, dict) or "state" not in loaded:
                return f"{state} holds no optimizer state"
        except FileNotFoundError:
            return f"{state} is missing"
        except Exception as exc:  # noqa: BLE001 - torch raises several types for a truncated or garbled file
            return f"{state} cannot be read ({_short(exc)})"
    return checksum_damage(folder, meta, optimizer=optimizer)


def _sha256(file: Path) -> str:
    digest = hashlib.sha256()
    with file.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def seal(folder: Path) -> None:
    """Write the folder's checksums (`kbrl_checksums.json`: the sha256 of every other file in it), once its files
    are saved; `kbrl_checkpoint.json` names the checksum file first, so that a folder whose checksums went missing
    is told from one saved before checksums were kept."""
    meta_file = folder / META_FILE
    meta = json.loads(meta_file.read_text(encoding="utf-8"))
    meta["checksums"] = CHECKSUM_FILE
    meta_file.write_text(json.dumps(meta, indent=2) + "\n", encoding="utf-8")
    sums = {file.name: _sha256(file) for file in sorted(folder.iterdir())
            if file.is_file() and file.name != CHECKSUM_FILE}
    (folder / CHECKSUM_FILE).write_text(json.dumps({"sha256": sums}, indent=1, sort_keys=True) + "\n",
                                        encoding="utf-8")


def checksum_damage(folder: Path, meta: dict[str, Any], *, optimizer: bool) -> str | None:
    """What the folder's checksums say is wrong (None: every file is as it was saved, or the folder was saved
    before checksums were kept)."""
    file = folder / CHECKSUM_FILE
    if not file.exists():
        return f"{file} is missing" if meta.get("checksums") else None
    try:
        sums = json.loads(file.read_text(encoding="utf-8")).get("sha256")
    except (OSError, UnicodeDecodeError, ValueError, AttributeError) as exc:
        return f"{file} is not valid JSON ({_short(exc)})"
    if not isinstance(sums, dict):
        return f"{file} holds no checksums"
    needed = [META_FILE, ADAPTER_CONFIG, ADAPTER_WEIGHTS, *([OPTIMIZER_FILE] if optimizer else [])]
    for name in [*needed, *sorted(set(sums) - set(needed))]:
        if name not in sums:
            return f"{file} has no checksum of {name}"
        target = folder / name
        try:
            if _sha256(target) != sums[name]:
                return f"{target} does not match its checksum (its bytes changed after it was saved)"
        except FileNotFoundError:
            return f"{target} is missing"
        except OSError as exc:
            return f"{target} cannot be read ({_short(exc)})"
    return None


def _short(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text[:120]


def newest_intact(
    rows: Sequence[dict[str, Any]], run_dir: Path, *, what: str, run_id: str,
    say: Callable[[str], None] | None = None,
) -> dict[str, Any] | None:
    """The newest row (newest first in `rows`) whose state and sampler weights are intact, its paths resolved;
    each one passed over is said (`say`, default stderr). None when `rows` is empty."""
    say = say or (lambda line: print(line, file=sys.stderr, flush=True))
    first_damage: str | None = None
    for row in rows:
        state = resolved_path(row.get("state_path"), run_dir)
        sampler = resolved_path(row.get("sampler_path"), run_dir)
        wrong = (damage(state, optimizer=True) if state else None) or (
            damage(sampler, optimizer=False) if sampler else None)
        if wrong is None:
            if first_damage is not None:
                say(f"run {run_id}: resuming from {what} step {row['step']}, the newest intact one.")
            return {**row, "state_path": state, "sampler_path": sampler}
        first_damage = first_damage or wrong
        say(f"run {run_id}: the {what} of step {row['step']} is damaged ({wrong}); trying the one before it.")
    if first_damage is not None:
        raise CheckpointDamagedError(
            f"Run {run_id} has no intact {what} to resume from ({first_damage}), so restore its folder "
            f"{run_dir} from a copy, or start over under a new run_id.")
    return None


@contextmanager
def saving(run_dir: Path, name: str) -> Iterator[None]:
    """Around a checkpoint's save: a failed write is an error naming the folder, never a success; afterwards, the
    disk must still have room for the next one. Each local folder the save wrote (`<name>/kbrl_checkpoint.json`
    under the run's folder: the state's and the sampler weights') is sealed with its checksums."""
    started = time.time()
    try:
        yield
        for meta in sorted(run_dir.glob(f"**/{name}/{META_FILE}")):
            if meta.stat().st_mtime >= started - 2:  # written by this save, not a stale folder of the same name
                seal(meta.parent)
    except Exception as exc:  # noqa: BLE001 - the backend's own error types; re-raised unless a write failure
        error = write_error(run_dir, exc, f"checkpoint {name} in") or _write_failed(run_dir, name, exc)
        if error is None:
            raise
        raise error from exc
    check_free_space(run_dir, f"after checkpoint {name}")


def _write_failed(run_dir: Path, name: str, exc: BaseException) -> DiskFullError | None:
    """torch reports a failed write without its cause ("file write failed"): most often a full disk or size limit."""
    text = str(exc).lower()
    if "write failed" in text or "failed writing" in text:
        return DiskFullError(f"Could not write checkpoint {name} in {run_dir} ({_short(exc)}): the disk or a "
                             "file-size limit is likely full, so free some space and run the same command again.")
    return None


def check_run_files(db_path: str | Path, log_dir: str | Path, run_id: str) -> None:
    """Before a run starts (the pipeline's check, before its orchestrator): the database's and the logs' folders can
    be written and have room, the database opens, and the run's checkpoints leave one to resume from. Each failure is
    one sentence (DamagedFileError, UnwritableError, DiskFullError); a damaged newest checkpoint is passed over here
    without a word (the run says so when it resumes)."""
    from kernelbench_rl.store import Store
    from kernelbench_rl.store.files import writable_folder

    db, logs = Path(db_path), Path(log_dir)
    writable_folder(db.parent, "the database's folder")
    writable_folder(logs, "the logs' folder")
    check_free_space(db, "before the run")
    check_free_space(logs, "before the run")
    store = Store(db)
    store.init()  # opens it read-write (a damaged file says so here) and brings its schema up to date
    run_dir = logs / run_id
    quiet: Callable[[str], None] = lambda line: None  # noqa: E731
    rl = store.dicts("SELECT step, state_path, sampler_path FROM checkpoints WHERE run_id = ? ORDER BY step DESC",
                     [run_id])
    if rl:
        newest_intact(rl, run_dir, what="checkpoint", run_id=run_id, say=quiet)
    else:
        sft = store.dicts("SELECT step, state_path, sampler_path FROM sft_steps WHERE run_id = ? "
                          "AND state_path IS NOT NULL ORDER BY step DESC", [run_id])
        newest_intact(sft, run_dir, what="SFT checkpoint", run_id=run_id, say=quiet)
