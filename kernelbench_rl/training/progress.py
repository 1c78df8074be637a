"""A rich progress bar for training steps (the CLI and `run_training(progress=True)`)."""

from __future__ import annotations

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn


class TrainProgress:
    def __init__(self, run_id: str, total_steps: int, completed: int = 0) -> None:
        self.progress = Progress(
            TextColumn("[bold]{task.fields[run_id]}"), BarColumn(), MofNCompleteColumn(),
            TextColumn("{task.fields[status]}"), TimeElapsedColumn(), TimeRemainingColumn(),
        )
        self.task = self.progress.add_task("train", total=total_steps, completed=completed, run_id=run_id,
                                           status="starting")

    def __enter__(self) -> TrainProgress:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        self.progress.__exit__(*exc)

    def update(self, result) -> None:
        m = result.metrics
        status = (f"step {result.step} · {result.stage} L{result.level} · reward {m.get('reward_mean', 0.0):.3f} · "
                  f"fmt {m.get('format_rate', 0.0):.2f} cmp {m.get('compile_rate', 0.0):.2f} "
                  f"ok {m.get('correct_rate', 0.0):.2f}")
        for event in result.events:
            status += f" · {event.kind} {event.from_value}->{event.to_value}"
        self.progress.update(self.task, completed=result.step + 1, status=status)
        self.progress.console.log(status)
