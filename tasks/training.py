"""Prefect tasks for training: one task per training step (a step is a batch of rollouts)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE



# No task-level retries: once optim_step has run, re-running the step in this process would train
# twice on it. A failed step is replayed by resuming the run (same run id), which restarts from the
# last checkpoint; infra faults inside the step (evaluation workers) are retried by the evaluator.
@task(name="train-step", cache_policy=NO_CACHE, retries=0, task_run_name="train-step-{step}")
def train_step(run: Any, step: int) -> dict:
    """Sample, evaluate, reward and train one step of `run` (a started TrainingRun); rows land in DuckDB.

    `step` is the step the run is about to take; it names the task run in the UI. A retried step
    re-does the same step, and its rows replace themselves (natural keys), so nothing duplicates.
    """
    result = run.step()
    return {"step": result.step, "stage": result.stage, "level": result.level, "loss": result.loss,
            "metrics": result.metrics, "checkpoint": result.checkpoint,
            "events": [e.__dict__ for e in result.events]}
