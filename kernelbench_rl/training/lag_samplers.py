"""The sampler weights of recent steps, kept so that a resumed asynchronous run samples as the live one did.

With `training.max_steps_off_policy` N >= 1, step k is sampled by the weights after step k-1-N (queued before
step k-1 trained). A run resumed from its checkpoint at step c would otherwise sample steps c+1..c+N with the
checkpoint's own weights (after step c): other samples, other rewards, another curriculum. So every step's
sampler weights are saved under a name of their own (`save_weights_for_sampler`, the same call a checkpoint
makes; Tinker keeps them `training.checkpoint_ttl_s`) and their paths recorded here, in
`<run folder>/lag_samplers.json` (step -> path; `start` for the weights RL started from). A resume reads the
paths of steps c-N..c-1, and the folders of local samplers no checkpoint can need any more are deleted.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from pathlib import Path
from typing import Any

from kernelbench_rl.training.checkpoints import is_remote, resolved_path, stored_path

RECORD_FILE = "lag_samplers.json"
START = "start"


class LagSamplers:
    """Step -> saved sampler path of one run, in its folder."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.file = self.run_dir / RECORD_FILE
        self._token = secrets.token_hex(3)  # a retried step in this process saves under a new name (write-once paths)
        self._saves = 0

    def _read(self) -> dict[str, str]:
        try:
            data = json.loads(self.file.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in data.items()} if isinstance(data, dict) else {}

    def _write(self, record: dict[str, str]) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        temporary = self.file.with_suffix(".json.tmp")
        temporary.write_text(json.dumps(record, indent=1, sort_keys=True) + "\n")
        os.replace(temporary, self.file)

    @staticmethod
    def key(step: int | None) -> str:
        return START if step is None or step < 0 else str(step)

    def save(self, training_client: Any, step: int | None, ttl_seconds: int | None) -> Any:
        """Save the training client's weights as the sampler of `step` (None: the run's starting weights), record
        the path, and return a sampling client of them."""
        from kernelbench_rl.training.optim import result_of

        self._saves += 1
        name = f"rl_sampler_{self.key(step)}_{self._token}{self._saves}"
        path = result_of(training_client.save_weights_for_sampler(name, ttl_seconds=ttl_seconds)).path
        self.record(step, path)
        return result_of(training_client.create_sampling_client(path))

    def record(self, step: int | None, path: str) -> None:
        record = self._read()
        record[self.key(step)] = stored_path(path, self.run_dir) or path
        self._write(record)

    def path(self, step: int | None) -> str | None:
        """The recorded sampler path of `step` (None: the starting weights), resolved; None when not recorded."""
        stored = self._read().get(self.key(step))
        return resolved_path(stored, self.run_dir) if stored else None

    def forget_after(self, step: int) -> None:
        """Drop the records of steps after `step` (an attempt whose state is lost wrote them)."""
        record = self._read()
        kept = {k: v for k, v in record.items() if _step_of(k) <= step}
        if kept != record:
            self._write(kept)

    def prune_before(self, step: int) -> None:
        """Forget the samplers of steps before `step` (none can be needed by a resume from a checkpoint at or after
        `step` + N) and delete their folders when they are local ones inside the run's folder."""
        record = self._read()
        gone = {k: v for k, v in record.items() if _step_of(k) < step}
        if not gone:
            return
        kept = {k: v for k, v in record.items() if k not in gone}
        self._write(kept)
        # A step that trained nothing shares the folder of the step before: a folder still named is kept.
        for stored in set(gone.values()) - set(kept.values()):
            path = resolved_path(stored, self.run_dir)
            if path is None or is_remote(path):
                continue
            folder = Path(path)
            try:
                folder.resolve().relative_to(self.run_dir.resolve())
            except ValueError:
                continue
            shutil.rmtree(folder, ignore_errors=True)


def _step_of(key: str) -> int:
    return -1 if key == START else int(key)
