"""Training progress for the CLI: a rich progress bar, or plain lines (`--no-progress`, logs, pipes).

Both report each problem of a step as its samples are judged (a step on a CPU can take minutes) and, from the
pace so far, about how long the rest of the run takes.
"""

from __future__ import annotations

import sys
import time
from typing import TextIO

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


def duration(seconds: float) -> str:
    seconds = max(0, int(round(seconds)))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def step_status(result) -> str:
    m = result.metrics
    status = (f"step {result.step} · {result.stage} L{result.level} · reward {m.get('reward_mean', 0.0):.3f} · "
              f"fmt {m.get('format_rate', 0.0):.2f} cmp {m.get('compile_rate', 0.0):.2f} "
              f"ok {m.get('correct_rate', 0.0):.2f}")
    for event in result.events:
        status += f" · {event.kind} {event.from_value}->{event.to_value}"
    return status


class Pace:
    """How long the steps left take at the pace of this invocation (problems judged so far, whole steps once
    there are some)."""

    def __init__(self, total_steps: int, completed: int) -> None:
        self.total, self.first = total_steps, completed
        self.started = time.monotonic()
        self.steps_done = 0
        self.step_started = self.started

    def step_done(self) -> None:
        self.steps_done += 1
        self.step_started = time.monotonic()

    def per_step(self, problems_done: int = 0, problems: int = 0) -> float | None:
        if self.steps_done:
            return (time.monotonic() - self.started) / self.steps_done
        if problems_done and problems:
            return (time.monotonic() - self.step_started) * problems / problems_done
        return None

    def left(self, problems_done: int = 0, problems: int = 0) -> str:
        per_step = self.per_step(problems_done, problems)
        if per_step is None:
            return ""
        steps_left = self.total - self.first - self.steps_done - (problems_done / problems if problems else 0)
        return f"about {duration(per_step)} per step, {duration(per_step * max(steps_left, 0))} left"


class TrainProgress:
    def __init__(self, run_id: str, total_steps: int, completed: int = 0) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.fields[run_id]}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn(),
        )
        self.task = self.progress.add_task("train", total=total_steps, completed=completed, run_id=run_id,
                                           status=f"step {completed}: sampling")
        self.pace = Pace(total_steps, completed)

    def __enter__(self) -> TrainProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def group_done(self, step: int, done: int, total: int) -> None:
        status = f"step {step}: {done}/{total} problems judged"
        left = self.pace.left(done, total)
        self.progress.update(self.task, status=status + (f" · {left}" if left else ""))

    def update(self, result) -> None:
        self.pace.step_done()
        status = step_status(result)
        self.progress.update(self.task, completed=result.step + 1, status=status)
        self.progress.console.log(status)


class TrainLines:
    """The same reports as plain lines, one per problem judged and one per step (`train --no-progress`)."""

    def __init__(self, run_id: str, total_steps: int, completed: int = 0, out: TextIO | None = None) -> None:
        self.run_id, self.out = run_id, out or sys.stdout
        self.pace = Pace(total_steps, completed)
        self._say(f"step {completed}: sampling")

    def __enter__(self) -> TrainLines:
        return self

    def __exit__(self, *exc) -> None:
        return None

    def _say(self, text: str) -> None:
        print(f"{self.run_id}: {text}", file=self.out, flush=True)

    def group_done(self, step: int, done: int, total: int) -> None:
        left = self.pace.left(done, total)
        self._say(f"step {step}: {done}/{total} problems judged ({duration(time.monotonic() - self.pace.step_started)})"
                  + (f"; {left}" if left else ""))

    def update(self, result) -> None:
        self.pace.step_done()
        left = self.pace.left()
        self._say(step_status(result) + (f" ({left})" if left else ""))
