"""Prefect tasks for training: one task per training step (a step is a batch of rollouts)."""

from __future__ import annotations

from typing import Any

from prefect import task
from prefect.cache_policies import NO_CACHE

from tasks._retry import INFRA_RETRIES, INFRA_RETRY_DELAY_S, retry_on_infra


@task(name="train-step", cache_policy=NO_CACHE, retries=INFRA_RETRIES, retry_delay_seconds=INFRA_RETRY_DELAY_S,
      retry_condition_fn=retry_on_infra, task_run_name="train-step-{step}")
def train_step(run: Any, step: int) -> dict:
    """Sample, evaluate, reward and train one step of `run` (a started TrainingRun); rows land in DuckDB.

    `step` is the step the run is about to take; it names the task run in the UI. A retried step
    re-does the same step, and its rows replace themselves (natural keys), so nothing duplicates.
    """
    result = run.step()
    return {"step": result.step, "stage": result.stage, "level": result.level, "loss": result.loss,
            "metrics": result.metrics, "checkpoint": result.checkpoint,
            "events": [e.__dict__ for e in result.events]}
