"""Flow: build the retrieval index over the stored corpus (embeddings cached per document and model)."""

from __future__ import annotations

from prefect import flow

from kernelbench_rl.commands.signals import note_stops
from tasks.corpus import build_index as build_index_task
from tasks._stops import cancelled_on_stop


@flow(name="build-index", log_prints=True)
@cancelled_on_stop
def build_index(
    db_path: str = "runs/kernelbench_rl.duckdb",
    model: str | None = None,
    kind: str = "auto",
    verified_only: bool = False,
    index_dir: str | None = None,
) -> dict:
    note_stops()  # SIGINT/SIGTERM: noted, then Prefect's handling
    report = build_index_task(db_path, model, kind, verified_only, index_dir)
    print(f"index {report['build_id']}: {report['num_docs']} docs, {report['index_kind']}, at {report['path']}")
    return report
