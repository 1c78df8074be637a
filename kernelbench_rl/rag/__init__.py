"""Retrieval-augmented prompts: corpus loaders, embeddings, FAISS index, leak-free retrieval.

Heavy libraries (datasets, sentence-transformers, faiss) are imported only when used.
"""

from kernelbench_rl.rag.build import BuildReport, build_corpus_index, default_index_dir
from kernelbench_rl.rag.corpus import (
    KERNELBOOK_HUB_ID,
    KERNELBOOK_REVISION,
    SAKANA_HUB_ID,
    SOURCES,
    CorpusDoc,
    IngestReport,
    LoadedCorpus,
    LoadStats,
    ingest_docs,
    load_kernelbook,
    load_own_solutions,
    load_sakana,
    load_source,
    read_corpus,
)
from kernelbench_rl.rag.embed import DEFAULT_MODEL, Embedder, embed_cached, embedding_text, resolve_model
from kernelbench_rl.rag.index import IndexMeta, IndexParams, VectorIndex, build_index, choose_kind, load_index, save_index
from kernelbench_rl.rag.normalize import code_sha256, normalise_code
from kernelbench_rl.rag.retrieve import NEAR_DUPLICATE_COSINE, RetrievalTrace, RetrievedExample, Retriever, open_retriever
from kernelbench_rl.rag.verify import VerifyReport, reverify_corpus

__all__ = [
    "DEFAULT_MODEL", "KERNELBOOK_HUB_ID", "KERNELBOOK_REVISION", "NEAR_DUPLICATE_COSINE", "SAKANA_HUB_ID", "SOURCES",
    "BuildReport", "CorpusDoc", "Embedder", "IndexMeta", "IndexParams", "IngestReport", "LoadStats", "LoadedCorpus",
    "RetrievalTrace", "RetrievedExample", "Retriever", "VectorIndex", "VerifyReport", "build_corpus_index",
    "build_index", "choose_kind", "code_sha256", "default_index_dir", "embed_cached", "embedding_text",
    "ingest_docs", "load_index", "load_kernelbook", "load_own_solutions", "load_sakana", "load_source",
    "normalise_code", "open_retriever", "read_corpus", "resolve_model", "reverify_corpus", "save_index",
]
