"""Flows: evaluate a checkpoint (optionally against the base model), and the nightly evaluation."""

from __future__ import annotations

from typing import Any

from prefect import flow

from flows.common import build_config, cluster_overrides, dask_task_runner
from kernelbench_rl.policy.openai_backend import is_openai_policy
from kernelbench_rl.training.checkpoint_eval import BASE, resolve_checkpoint
from kernelbench_rl.store import Store
from tasks.evaluation import evaluate, publish_report


@flow(name="evaluate-checkpoint", log_prints=True)
def evaluate_checkpoint(
    run_id: str = "default",
    checkpoint: str = "latest",
    compare_base: bool = True,
    config: str = "default",
    overrides: list[str] = [],  # noqa: B006
    db_path: str = "runs/kernelbench_rl.duckdb",
    log_dir: str = "runs/logs",
    samples_per_problem: int = 4,
    split: str = "holdout",
    max_problems: int | None = None,
    levels: list[int] | None = None,
    cluster: str | None = None,
    base_url: str | None = None,
) -> str:
    """pass@k, fast_p (p in 0, 0.5, 0.8, 1, 1.5, 2), compile/correct rates and geomean speedup per level.

    `cluster` (local | dask-local | dask://HOST:PORT; default: the config's eval.cluster) on Dask runs the
    checkpoints' evaluations side by side as tasks on Prefect's DaskTaskRunner over that cluster, their
    kernels on the same cluster's warm pools. checkpoint="openai:MODEL" with base_url evaluates a model
    behind an OpenAI-compatible server instead."""
    overrides = cluster_overrides(overrides, cluster)
    cfg = build_config(config, overrides, run_id=run_id, db_path=db_path, log_dir=log_dir, levels=levels)
    if is_openai_policy(checkpoint):
        name = checkpoint
    else:
        name = resolve_checkpoint(Store(db_path), cfg.resolved_run_id(), checkpoint)["name"] if checkpoint != BASE else BASE
    labels = [BASE, name] if compare_base and name != BASE else [name]
    runner = dask_task_runner(cfg.eval.cluster)
    if runner is None:
        # One after the other: two evaluators on one GPU would disturb each other's timings.
        reports = [evaluate(cfg, label, samples_per_problem, split, max_problems, base_url) for label in labels]
    else:
        reports = evaluate_on_cluster.with_options(task_runner=runner)(
            cfg, labels, samples_per_problem, split, max_problems, base_url)
    table = publish_report(reports, str(cfg.run_log_dir()), f"eval-{cfg.resolved_run_id()}-{name}")
    print(table)
    return table


@flow(name="evaluate-on-cluster", log_prints=True)
def evaluate_on_cluster(cfg: Any, labels: list[str], samples_per_problem: int, split: str,
                        max_problems: int | None, base_url: str | None = None) -> list[Any]:
    """The checkpoints' evaluations as concurrent tasks on the flow's (Dask) task runner."""
    futures = [evaluate.submit(cfg, label, samples_per_problem, split, max_problems, base_url) for label in labels]
    return [future.result() for future in futures]


@flow(name="nightly-eval", log_prints=True)
def nightly_eval(
    run_id: str = "default",
    config: str = "default",
    overrides: list[str] = [],  # noqa: B006
    db_path: str = "runs/kernelbench_rl.duckdb",
    log_dir: str = "runs/logs",
    samples_per_problem: int = 4,
    levels: list[int] | None = None,
    cluster: str | None = None,
    policy: str | None = None,
    base_url: str | None = None,
) -> str:
    """The newest checkpoint of `run_id` on the holdout set, side by side with the base model; or,
    with policy="openai:MODEL" and base_url, that served model alone (its key from OPENAI_API_KEY).

    `cluster`: local | dask-local | dask://HOST:PORT (default: the config's eval.cluster); see evaluate_checkpoint."""
    return evaluate_checkpoint(run_id=run_id, checkpoint=policy or "latest", compare_base=policy is None, config=config,
                               overrides=overrides, db_path=db_path, log_dir=log_dir,
                               samples_per_problem=samples_per_problem, split="holdout", levels=levels,
                               cluster=cluster, base_url=base_url)
