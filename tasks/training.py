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


# No retries for the same reason as train-step; a re-run resumes from the last SFT checkpoint.
@task(name="sft-warm-start", cache_policy=NO_CACHE, retries=0)
def sft_warm_start(config: Any) -> dict:
    """Supervised warm start of the run's policy on the leak-free verified corpus (rows in `sft_steps`)."""
    from dataclasses import asdict

    from kernelbench_rl.compose import build_run_parts
    from kernelbench_rl.training.sft import run_sft

    from prefect import get_run_logger

    logger = get_run_logger()

    def log(result) -> None:
        if result.step % 10 == 0 or result.checkpoint:
            logger.info(f"sft step {result.step}: loss {result.loss:.4f}/token over {result.tokens} tokens"
                        + (f", checkpoint {result.checkpoint}" if result.checkpoint else ""))

    parts = build_run_parts(config)
    summary = run_sft(parts, retrieve=parts.open_retriever(), on_step=log)
    logger.info(f"sft: {summary.num_examples} examples, {summary.steps_run} steps run of {summary.total_steps}, "
                f"loss {summary.first_loss} -> {summary.last_loss}; left out {summary.excluded}")
    return asdict(summary)


@task(name="publish-training-curves", cache_policy=NO_CACHE)
def publish_training_curves(config: Any) -> str:
    """A markdown artifact: the run's summary table and its SFT loss and RL reward curves (embedded PNG)."""
    import base64

    from prefect.artifacts import create_markdown_artifact

    from kernelbench_rl.store import Store
    from kernelbench_rl.training.report import run_summary, training_curves_plot
    from tasks.evaluation import artifact_key

    store = Store(config.db_path)
    run_id = config.resolved_run_id()
    plot = training_curves_plot(store, run_id, config.run_log_dir() / "training_curves.png")
    image = base64.b64encode(plot.read_bytes()).decode()
    summary = run_summary(store, run_id)
    create_markdown_artifact(
        key=artifact_key(f"training-{run_id}"),
        markdown=f"## Training: {run_id}\n\n```\n{summary}\n```\n\n![SFT loss and RL reward](data:image/png;base64,{image})\n",
        description=f"SFT loss and RL reward curves ({plot})",
    )
    return summary
