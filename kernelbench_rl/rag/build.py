"""Index build: stored corpus -> cached embeddings -> FAISS index folder + an `index_builds` row."""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernelbench_rl.rag.corpus import read_corpus
from kernelbench_rl.rag.embed import EmbedReport, Embedder, embed_cached
from kernelbench_rl.rag.index import IndexParams, KindChoice, VectorIndex, build_index, save_index


def default_index_dir(store: Any) -> Path:
    """`rag_index/` beside the database file (override with KBRL_RAG_INDEX)."""
    configured = os.environ.get("KBRL_RAG_INDEX")
    return Path(configured) if configured else Path(store.path).parent / "rag_index"


@dataclass
class BuildReport:
    index: VectorIndex
    embed: EmbedReport
    path: Path
    build_id: str


def build_corpus_index(
    store: Any,
    embedder: Embedder,
    out_dir: str | Path | None = None,
    *,
    kind: KindChoice = "auto",
    verified_only: bool = False,
    backend: str | None = None,
    params: IndexParams | None = None,
    show_progress: bool = False,
) -> BuildReport:
    """Embed what is new, build the index over every stored document (or only re-verified ones), save it."""
    docs = read_corpus(store, verified_only=verified_only, backend=backend)
    texts = {d["sha256"]: d["pytorch_code"] for d in docs}
    vectors_by_sha, embed_report = embed_cached(store, embedder, texts, show_progress=show_progress)
    shas = [d["sha256"] for d in docs]
    matrix = np.stack([vectors_by_sha[s] for s in shas]) if shas else np.zeros((0, embedder.dimension), np.float32)
    index = build_index(shas, matrix, model_id=embedder.model_id, kind=kind, params=params)
    index.meta.params = {**index.meta.params, "verified_only": verified_only, "backend": backend}
    path = save_index(index, out_dir or default_index_dir(store))
    build_id = index.meta.build_id
    store.upsert("index_builds", [{
        "build_id": build_id, "model_id": index.meta.model_id, "dimension": index.meta.dimension,
        "index_kind": index.meta.index_kind, "num_docs": len(shas), "corpus_hash": index.meta.corpus_hash,
        "path": str(path), "build_seconds": index.meta.build_seconds,
        "params_json": {**index.meta.params, "params": asdict(params or IndexParams())},
    }])
    return BuildReport(index=index, embed=embed_report, path=path, build_id=build_id)
