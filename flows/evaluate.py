"""Flows: evaluate a checkpoint (optionally against the base model), and the nightly evaluation."""

from __future__ import annotations

from prefect import flow

from flows.common import build_config
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
    base_url: str | None = None,
) -> str:
    """pass@k, fast_p (p in 0, 0.5, 0.8, 1, 1.5, 2), compile/correct rates and geomean speedup per level.

    checkpoint="openai:MODEL" with base_url evaluates a model behind an OpenAI-compatible server instead."""
    cfg = build_config(config, overrides, run_id=run_id, db_path=db_path, log_dir=log_dir, levels=levels)
    if is_openai_policy(checkpoint):
        name = checkpoint
    else:
        name = resolve_checkpoint(Store(db_path), cfg.resolved_run_id(), checkpoint)["name"] if checkpoint != BASE else BASE
    # One after the other: two evaluators on one GPU would disturb each other's timings.
    labels = [BASE, name] if compare_base and name != BASE else [name]
    reports = [evaluate(cfg, label, samples_per_problem, split, max_problems, base_url) for label in labels]
    table = publish_report(reports, str(cfg.run_log_dir()), f"eval-{cfg.resolved_run_id()}-{name}")
    print(table)
    return table


@flow(name="nightly-eval", log_prints=True)
def nightly_eval(
    run_id: str = "default",
    config: str = "default",
    overrides: list[str] = [],  # noqa: B006
    db_path: str = "runs/kernelbench_rl.duckdb",
    log_dir: str = "runs/logs",
    samples_per_problem: int = 4,
    levels: list[int] | None = None,
    policy: str | None = None,
    base_url: str | None = None,
) -> str:
    """The newest checkpoint of `run_id` on the holdout set, side by side with the base model; or,
    with policy="openai:MODEL" and base_url, that served model alone (its key from OPENAI_API_KEY)."""
    return evaluate_checkpoint(run_id=run_id, checkpoint=policy or "latest", compare_base=policy is None, config=config,
                               overrides=overrides, db_path=db_path, log_dir=log_dir,
                               samples_per_problem=samples_per_problem, split="holdout", levels=levels,
                               base_url=base_url)
