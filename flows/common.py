"""Shared flow helpers: build the training config from typed flow parameters."""

from __future__ import annotations

from typing import Any

from kernelbench_rl.compose import first_training_ids
from kernelbench_rl.config.schema import TrainConfig, load_config


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


def cluster_overrides(overrides: list[str], cluster: str | None) -> list[str]:
    """The flow's `cluster` parameter, when given, wins over an `eval.cluster=` override."""
    return [*overrides, f"eval.cluster={cluster}"] if cluster else list(overrides)


def dask_task_runner(cluster: str) -> Any | None:
    """Prefect's DaskTaskRunner on the cluster `eval.cluster` names; None for `local`.

    `dask://HOST:PORT` connects to that scheduler; `dask-local` starts a cluster for the flow run
    (dask-cuda's LocalCUDACluster when this host has GPUs, else a LocalCluster), and the evaluators of
    the tasks that run on it find it through their worker (`eval.cluster=dask-local` inside a Dask
    worker means the surrounding cluster)."""
    from kernelbench_rl.evaluation.cluster.cluster_spec import parse_cluster

    spec = parse_cluster(cluster)
    if not spec.is_dask:
        return None
    from prefect_dask import DaskTaskRunner

    if spec.kind == "dask":
        return DaskTaskRunner(address=spec.address)
    from prefect.client.orchestration import get_client

    from kernelbench_rl.evaluation.cluster.cluster import local_gpu_count

    # Tasks on the workers report to this flow's API, the ephemeral one included (else each worker
    # would try to start a temporary server of its own, and fail).
    env = {"PREFECT_API_URL": str(get_client(sync_client=True).api_url).rstrip("/")}
    if local_gpu_count():
        import importlib.util

        from kernelbench_rl.errors import UserError

        if importlib.util.find_spec("dask_cuda") is None:
            raise UserError("cluster=dask-local on GPUs needs dask-cuda: pip install 'kernelbench-rl[cluster-gpu]'.")
        return DaskTaskRunner(cluster_class="dask_cuda.LocalCUDACluster",
                              cluster_kwargs={"threads_per_worker": 32, "dashboard_address": None, "env": env})
    return DaskTaskRunner(cluster_class="distributed.LocalCluster",
                          cluster_kwargs={"n_workers": 2, "threads_per_worker": 8, "dashboard_address": None, "env": env})
