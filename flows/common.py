"""Shared flow helpers: build the training config from typed flow parameters."""

from __future__ import annotations

from kernelbench_rl.config.schema import TrainConfig, load_config
from kernelbench_rl.training.loop import first_training_ids


def build_config(
    config: str, overrides: list[str], *, run_id: str, db_path: str, log_dir: str,
    train_steps: int | None = None, levels: list[int] | None = None, num_problems: int | None = None,
) -> TrainConfig:
    """A YAML config (packaged name or path) + `key=value` overrides + the flow's typed parameters.

    Typed parameters win over overrides, which win over the file, so the UI form means what it says.
    """
    extra = [f"run_id={run_id}", f"db_path={db_path}", f"log_dir={log_dir}"]
    if train_steps is not None:
        extra.append(f"training.steps={train_steps}")
    if levels:
        extra.append(f"problems.levels=[{','.join(str(lv) for lv in levels)}]")
    cfg = load_config(config, [*overrides, *extra])
    if num_problems:
        # The first N training problems of those levels (the holdout split is never trained on).
        ids = first_training_ids(cfg, num_problems)
        cfg = load_config(config, [*overrides, *extra, f"problems.ids=[{','.join(ids)}]"])
    return cfg
