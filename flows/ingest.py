"""Flow: record the problem set and ingest retrieval corpora into DuckDB."""

from __future__ import annotations

from prefect import flow

from kernelbench_rl.commands.signals import note_stops
from tasks.corpus import ingest_source
from tasks.problems import sync_problems
from tasks._stops import cancelled_on_stop


@flow(name="ingest-corpus", log_prints=True)
@cancelled_on_stop
def ingest_corpus(
    db_path: str = "runs/kernelbench_rl.duckdb",
    sources: list[str] = ["solutions"],  # noqa: B006 - Prefect parameters are copied per run
    source_paths: dict[str, str] | None = None,
    limit: int | None = None,
    levels: list[int] | None = None,
    problems_root: str | None = None,
    holdout_fraction: float = 0.2,
    split_seed: int = 0,
    kernelbench_root: str | None = None,
) -> dict:
    """Record the problem set and ingest retrieval corpora into DuckDB.

    Args:
        db_path: The DuckDB file to write to.
        sources: Corpora to ingest: solutions (our own, offline), kernelbook, sakana.
        source_paths: A local copy per source, e.g. {"kernelbook": "/data/kernelbook"}.
        limit: Ingest at most this many rows per source (empty: all).
        levels: KernelBench levels whose problems are recorded (empty: all).
        problems_root: A KernelBench checkout or kernrl's problems folder (empty: the bundled problems).
        holdout_fraction: Fraction of problems held out for evaluation, in [0, 1).
        split_seed: Seed of the train/holdout split.
        kernelbench_root: The older name of problems_root.
    """
    note_stops()  # SIGINT/SIGTERM: noted, then Prefect's handling
    problems = sync_problems(db_path, levels, problems_root or kernelbench_root, holdout_fraction, split_seed)
    print(f"recorded {problems} problems in {db_path}")
    reports = {}
    for source in sources:
        report = ingest_source(db_path, source, (source_paths or {}).get(source), limit)
        print(f"{source}: {report['inserted']} new documents, {report['already_stored']} already stored, "
              f"skipped {report['stats'].get('skipped', {})}")
        reports[source] = report
    return {"problems": problems, "sources": reports}
