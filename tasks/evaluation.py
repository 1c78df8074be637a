"""Prefect tasks for checkpoint evaluation and its artifacts."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from prefect import task
from prefect.artifacts import create_markdown_artifact
from prefect.cache_policies import NO_CACHE

from tasks._retry import INFRA_RETRIES, INFRA_RETRY_DELAY_S, retry_on_infra


@task(name="evaluate-checkpoint", cache_policy=NO_CACHE, retries=INFRA_RETRIES,
      retry_delay_seconds=INFRA_RETRY_DELAY_S, retry_condition_fn=retry_on_infra, task_run_name="evaluate-{checkpoint}")
def evaluate(config: Any, checkpoint: str, samples_per_problem: int, split: str, max_problems: int | None,
             base_url: str | None = None) -> Any:
    from kernelbench_rl.compose import build_run_parts
    from kernelbench_rl.training.checkpoint_eval import evaluate_checkpoint

    parts = build_run_parts(config, policy_beside=True)
    # The same prompts as training: retrieved examples when the run trains with retrieval.
    retrieve = parts.open_retriever()
    return evaluate_checkpoint(parts, checkpoint=checkpoint, samples_per_problem=samples_per_problem,
                               split=split, max_problems=max_problems, retrieve=retrieve, base_url=base_url)


def artifact_key(name: str) -> str:
    """Prefect artifact keys allow only lowercase letters, digits and dashes; run ids may hold more."""
    return re.sub(r"-{2,}", "-", re.sub(r"[^a-z0-9-]", "-", name.lower())).strip("-") or "eval"


@task(name="publish-report", cache_policy=NO_CACHE)
def publish_report(reports: list[Any], out_dir: str, key: str, header: str = "") -> str:
    """A markdown artifact with the side-by-side table, the speedup plot and, for GPU evaluations, the roofline."""
    from kernelbench_rl.training.checkpoint_eval import report_markdown

    table, markdown, plot = report_markdown(reports, out_dir, key, header)
    create_markdown_artifact(
        key=artifact_key(key),
        markdown=markdown,
        description=f"pass@k, fast_p and rates per checkpoint ({plot})",
    )
    return table


@task(name="publish-note", cache_policy=NO_CACHE)
def publish_note(key: str, text: str) -> None:
    """A markdown artifact that says why a flow had nothing to do."""
    create_markdown_artifact(key=artifact_key(key), markdown=f"## Checkpoint evaluation\n\n{text}\n", description=text)
