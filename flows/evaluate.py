"""Flows: evaluate a checkpoint (optionally against the base model), and the nightly evaluation."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from prefect import flow

from flows.common import build_config, cluster_overrides, dask_task_runner
from kernelbench_rl.commands.options import check_max_problems
from kernelbench_rl.commands.signals import note_stops
from kernelbench_rl.config.schema import apply_overrides, config_from_dict
from kernelbench_rl.policy.openai_backend import is_openai_policy
from kernelbench_rl.store import Store
from kernelbench_rl.store.checkpoints import BASE, resolve_checkpoint
from kernelbench_rl.training.checkpoint_eval import nightly_targets
from tasks.evaluation import evaluate, publish_note, publish_report
from tasks._stops import cancelled_on_stop


@flow(name="evaluate-checkpoint", log_prints=True)
@cancelled_on_stop
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
    note_stops()  # SIGINT/SIGTERM: noted, then Prefect's handling
    check_max_problems(max_problems, "max_problems")
    overrides = cluster_overrides(overrides, cluster)
    cfg = build_config(config, overrides, run_id=run_id, db_path=db_path, log_dir=log_dir, levels=levels)
    if is_openai_policy(checkpoint):
        name = checkpoint
    else:
        name = resolve_checkpoint(Store(db_path), cfg.resolved_run_id(), checkpoint).name if checkpoint != BASE else BASE
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
@cancelled_on_stop
def evaluate_on_cluster(cfg: Any, labels: list[str], samples_per_problem: int, split: str,
                        max_problems: int | None, base_url: str | None = None) -> list[Any]:
    """The checkpoints' evaluations as concurrent tasks on the flow's (Dask) task runner."""
    futures = [evaluate.submit(cfg, label, samples_per_problem, split, max_problems, base_url) for label in labels]
    return [future.result() for future in futures]


@flow(name="nightly-eval", log_prints=True)
@cancelled_on_stop
def nightly_eval(
    run_ids: list[str] = [],  # noqa: B006
    overrides: list[str] = [],  # noqa: B006
    db_path: str = "runs/kernelbench_rl.duckdb",
    samples_per_problem: int = 4,
    max_problems: int | None = None,
    cluster: str | None = None,
    policy: str | None = None,
    base_url: str | None = None,
) -> str:
    """The newest checkpoint of each run in `run_ids` (empty: the run with the newest checkpoint) on its
    holdout set, beside the base model, with the run's own configuration (`overrides` change it); or a
    model behind an OpenAI-compatible server (`policy`), alone.

    Args:
        run_ids: Runs to evaluate; empty evaluates the run with the newest checkpoint. With `policy`, the
            first names the run its report is filed under (default: "nightly").
        overrides: Config overrides applied over each run's own configuration, as key=value.
        db_path: The DuckDB file that holds the runs; results are added to it (eval_reports, eval_samples).
        samples_per_problem: Samples per held-out problem.
        max_problems: Held-out problems evaluated (empty: all of them; else at least 1).
        cluster: Where kernels are evaluated: local | dask-local | dask://HOST:PORT (default: eval.cluster).
        policy: "openai:MODEL" evaluates that served model instead of a run's checkpoint (its key from
            OPENAI_API_KEY).
        base_url: The OpenAI-compatible server of `policy`, e.g. http://127.0.0.1:8001/v1.
    """
    check_max_problems(max_problems, "max_problems")
    overrides = cluster_overrides(overrides, cluster)
    if policy:
        return evaluate_checkpoint(run_id=run_ids[0] if run_ids else "nightly", checkpoint=policy, compare_base=False,
                                   overrides=overrides, db_path=db_path, log_dir=str(Path(db_path).parent / "logs"),
                                   samples_per_problem=samples_per_problem, split="holdout", max_problems=max_problems,
                                   base_url=base_url)
    targets = nightly_targets(Store(db_path), run_ids)
    if not targets:
        note = f"Nothing to evaluate: no run in {db_path} has a checkpoint yet (train one, e.g. `make run`)."
        publish_note("nightly-eval", note)
        print(note)
        return note
    tables = []
    for target in targets:
        # The run id is pinned: a run named by the hash of its config would otherwise change with the overrides.
        cfg = apply_overrides(config_from_dict(target.config), [*overrides, f"db_path={db_path}", f"run_id={target.run_id}"])
        header = (f"Nightly evaluation of run `{target.run_id}`, checkpoint `{target.checkpoint}` (step {target.step}): "
                  f"{target.reason}.")
        print(header)
        reports = [evaluate(cfg, label, samples_per_problem, "holdout", max_problems)
                   for label in (BASE, target.checkpoint)]
        tables.append(publish_report(reports, str(cfg.run_log_dir()), f"nightly-{target.run_id}", header))
    return "\n\n".join(tables)
