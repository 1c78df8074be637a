"""Flow: record the problem set and ingest retrieval corpora into DuckDB."""

from __future__ import annotations

from prefect import flow

from tasks.problems import sync_problems


@flow(name="ingest-corpus", log_prints=True)
def ingest_corpus(
    db_path: str = "runs/kernelbench_rl.duckdb",
    levels: list[int] | None = None,
    kernelbench_root: str | None = None,
    holdout_fraction: float = 0.2,
    split_seed: int = 0,
) -> dict[str, int]:
    problems = sync_problems(db_path, levels, kernelbench_root, holdout_fraction, split_seed)
    print(f"recorded {problems} problems in {db_path}")
    return {"problems": problems}
