"""Problems' speed of light worked out in a helper process beside the worker.

The first floor in a process imports and warms torch's meta kernels and FLOP counter: 3-5 s of Python that, run on a
thread of the worker, slowed the worker's own device work beside it (a cold level-2 folder's first problems took
their inputs' discrimination 1.3-1.7 s instead of 0.6-0.7 s on an H200). Here that work runs in a process of its
own, started with the pool and warmed before the first question comes; the worker asks with a problem's file and
gets the floor back as a dict. Should the helper fail or fall silent, the worker works the floor out itself, as it
did before (`floor_for`): the floor backs a defence (a time under it is flagged), so it is never skipped for want of
the helper.

    python -m kernelbench_rl.evaluation.worker.floor_service GPU_NAME     (the worker starts it; one JSON line per question)

Worker side: torch and the standard library only.
"""

from __future__ import annotations

import dataclasses
import json
import os
import select
import subprocess
import sys
import threading
from typing import Any

from kernelbench_rl.evaluation.worker import startup

# The first answer waits for the helper's imports and warm-up; later ones take milliseconds. Past these the helper
# is stopped and the worker works floors out itself.
FIRST_ANSWER_S = 90.0
ANSWER_S = 30.0


class FloorService:
    """The helper process, asked one question at a time. `floor(path, precision, label)` returns a
    `floor.Floor`, a one-line reason there is none, or None when the helper cannot answer (the caller then works it
    out itself)."""

    def __init__(self, gpu: str) -> None:
        self.gpu = gpu
        self.failure = ""
        self._lock = threading.Lock()
        self._answered = False
        # The meta device only: no CUDA context, no device memory.
        env = {**os.environ, "PYTHONPATH": startup.package_pythonpath(), "CUDA_VISIBLE_DEVICES": ""}
        self._process: subprocess.Popen | None = subprocess.Popen(
            [sys.executable, "-m", "kernelbench_rl.evaluation.worker.floor_service", gpu],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env, text=True, bufsize=1)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process is not None else None

    def floor(self, path: str, precision: str, label: str) -> Any:
        from kernelbench_rl.evaluation.timing import floor as floors

        with self._lock:
            process = self._process
            if process is None:
                return None
            try:
                assert process.stdin is not None and process.stdout is not None
                process.stdin.write(json.dumps({"path": path, "precision": precision, "label": label}) + "\n")
                process.stdin.flush()
                wait_s = ANSWER_S if self._answered else FIRST_ANSWER_S
                ready, _, _ = select.select([process.stdout], [], [], wait_s)
                if not ready:
                    raise TimeoutError(f"no answer in {wait_s:.0f} s")
                line = process.stdout.readline()
                if not line:
                    raise EOFError(f"the helper exited (code {process.poll()})")
                answer = json.loads(line)
            except (OSError, ValueError, TimeoutError, EOFError, AssertionError) as exc:
                self.failure = f"{type(exc).__name__}: {exc}"[:200]
                self._stop()
                return None
            self._answered = True
        if "floor" in answer:
            fields = {f.name for f in dataclasses.fields(floors.Floor)}
            try:
                return floors.Floor(**{k: v for k, v in dict(answer["floor"]).items() if k in fields})
            except (TypeError, ValueError) as exc:  # an answer that is not a floor: worked out by the caller
                self.failure = f"an answer that is not a floor: {type(exc).__name__}: {exc}"[:200]
                return None
        return str(answer.get("why") or "no floor")

    def _stop(self) -> None:
        process, self._process = self._process, None
        if process is not None and process.poll() is None:
            process.kill()
            process.wait()

    def close(self) -> None:
        with self._lock:
            self._stop()


def serve(gpu: str, lines: Any = None, out: Any = None) -> None:
    """The helper's loop: warm up, then answer each question line with one JSON line."""
    from kernelbench_rl.evaluation.timing import floor as floors
    from kernelbench_rl.evaluation.sandbox import runtime

    lines = sys.stdin if lines is None else lines
    out = sys.stdout if out is None else out
    floors.warm_up(gpu)
    for count, line in enumerate(lines):
        try:
            question = json.loads(line)
            module = runtime.load_module_from_file(question["path"], f"kbrl_floor_problem_{count}")
            found = floors.problem_floor(module, question["precision"], gpu)
            answer: dict[str, Any] = {"floor": found.as_dict()}
        except Exception as exc:  # noqa: BLE001 - an unknown GPU, a problem the meta device cannot run
            answer = {"why": floors.why_no_floor(exc)}
        out.write(json.dumps(answer) + "\n")
        out.flush()


if __name__ == "__main__":
    if len(sys.argv) != 2:
        print("usage: python -m kernelbench_rl.evaluation.worker.floor_service GPU_NAME", file=sys.stderr)
        raise SystemExit(2)
    # The answers get their own copy of stdout; whatever a problem prints goes to stderr, not into an answer.
    answers = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    try:
        serve(sys.argv[1], sys.stdin, answers)
    except (BrokenPipeError, KeyboardInterrupt):
        pass
