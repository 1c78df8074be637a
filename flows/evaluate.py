"""Flows: evaluate a checkpoint (optionally against the base model), and the nightly evaluation."""

from __future__ import annotations

from prefect import flow

from flows.common import build_config
from kernelbench_rl.config.schema import apply_overrides, config_from_dict
from kernelbench_rl.store import Store
from kernelbench_rl.training.checkpoint_eval import BASE, nightly_targets, resolve_checkpoint
from tasks.evaluation import evaluate, publish_note, publish_report


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
) -> str:
    """pass@k, fast_p (p in 0, 0.5, 0.8, 1, 1.5, 2), compile/correct rates and geomean speedup per level."""
    cfg = build_config(config, overrides, run_id=run_id, db_path=db_path, log_dir=log_dir, levels=levels)
    name = resolve_checkpoint(Store(db_path), cfg.resolved_run_id(), checkpoint)["name"] if checkpoint != BASE else BASE
    # One after the other: two evaluators on one GPU would disturb each other's timings.
    labels = [BASE, name] if compare_base and name != BASE else [name]
    reports = [evaluate(cfg, label, samples_per_problem, split, max_problems) for label in labels]
    table = publish_report(reports, str(cfg.run_log_dir()), f"eval-{cfg.resolved_run_id()}-{name}")
    print(table)
    return table


@flow(name="nightly-eval", log_prints=True)
def nightly_eval(
    run_ids: list[str] = [],  # noqa: B006
    overrides: list[str] = [],  # noqa: B006
    db_path: str = "runs/kernelbench_rl.duckdb",
    samples_per_problem: int = 4,
    max_problems: int | None = None,
) -> str:
    """The newest checkpoint of each run in `run_ids` (empty: the run with the newest checkpoint) on its
    holdout set, beside the base model, with the run's own configuration (`overrides` change it).

    Args:
        run_ids: Runs to evaluate; empty evaluates the run with the newest checkpoint.
        overrides: Config overrides applied over each run's own configuration, as key=value.
        db_path: The DuckDB file that holds the runs; results are added to it (eval_reports, eval_samples).
        samples_per_problem: Samples per held-out problem.
        max_problems: Held-out problems evaluated (empty: all of them).
    """
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
