"""Prefect tasks for the retrieval corpus and its index (thin wrappers over kernelbench_rl.rag)."""

from __future__ import annotations

from prefect import task

from kernelbench_rl.store import Store
from tasks._retry import INFRA_RETRIES, INFRA_RETRY_DELAY_S, retry_on_infra


@task(name="ingest-source", retries=INFRA_RETRIES, retry_delay_seconds=INFRA_RETRY_DELAY_S, retry_condition_fn=retry_on_infra)
def ingest_source(db_path: str, source: str, path: str | None = None, limit: int | None = None) -> dict:
    """Load one corpus source, skip and count bad rows, store new documents once each."""
    from kernelbench_rl.rag.corpus import ingest_docs, load_source

    report = ingest_docs(Store(db_path), load_source(source, path, limit))
    return {"source": source, "inserted": report.inserted, "already_stored": report.already_stored,
            "stats": report.stats.to_dict()}


@task(name="build-index", retries=INFRA_RETRIES, retry_delay_seconds=INFRA_RETRY_DELAY_S, retry_condition_fn=retry_on_infra)
def build_index(db_path: str, model: str | None = None, kind: str = "auto", verified_only: bool = False,
                index_dir: str | None = None) -> dict:
    """Embed what is new (cached), build and save the FAISS index, record the build."""
    from kernelbench_rl.rag.build import build_corpus_index
    from kernelbench_rl.rag.embed import Embedder

    report = build_corpus_index(Store(db_path), Embedder(model), index_dir, kind=kind, verified_only=verified_only)
    return {"build_id": report.build_id, "path": str(report.path), "num_docs": report.index.size,
            "index_kind": report.index.meta.index_kind, "model_id": report.index.meta.model_id}
