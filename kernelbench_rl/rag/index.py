"""FAISS indexes over unit vectors (inner product = cosine), saved without pickles.

Exact search (`IndexFlatIP`) answers a small corpus faster than any approximate index can be
built; past `AUTO_APPROX_ABOVE` vectors an HNSW graph keeps queries in the low milliseconds. IVF is
available by request. An index is two files in one folder: `index.faiss` (FAISS's own serialisation) and
`index.json` (model id, dimension, normalisation, corpus hash, document order, build parameters, and the sha256
of `index.faiss` as it was written). Loading checks that checksum and the corpus hash before FAISS reads a byte:
vectors garbled in place (the file's size unchanged) are found as surely as a truncated file.
"""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kernelbench_rl.errors import UserError
from kernelbench_rl.store.files import DamagedFileError

IndexKind = Literal["flat", "hnsw", "ivf"]
KindChoice = Literal["auto", "flat", "hnsw", "ivf"]

AUTO_APPROX_ABOVE = 20_000
HNSW_M = 32
HNSW_EF_CONSTRUCTION = 100
HNSW_EF_SEARCH = 64
INDEX_FILE = "index.faiss"
META_FILE = "index.json"
META_VERSION = 1


def choose_kind(num_vectors: int, kind: KindChoice = "auto") -> IndexKind:
    if kind == "auto":
        return "hnsw" if num_vectors > AUTO_APPROX_ABOVE else "flat"
    if kind not in ("flat", "hnsw", "ivf"):
        raise UserError(f"Unknown index kind {kind!r}; choose auto, flat, hnsw or ivf.")
    return kind


def normalise_rows(vectors: np.ndarray) -> np.ndarray:
    out = np.ascontiguousarray(vectors, dtype=np.float32).copy()
    norms = np.linalg.norm(out, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return out / norms


def corpus_hash(doc_shas: Sequence[str]) -> str:
    """Identity of a corpus: the ordered document keys."""
    return hashlib.sha256("\n".join(doc_shas).encode()).hexdigest()


@dataclass
class IndexParams:
    hnsw_m: int = HNSW_M
    ef_construction: int = HNSW_EF_CONSTRUCTION
    ef_search: int = HNSW_EF_SEARCH
    ivf_nlist: int | None = None  # default 4 * sqrt(n)
    ivf_nprobe: int = 16


def build_faiss(vectors: np.ndarray, kind: IndexKind, params: IndexParams | None = None) -> Any:
    """A FAISS inner-product index holding `vectors` (already unit length), ids = row positions."""
    import faiss

    params = params or IndexParams()
    n, dim = vectors.shape
    if kind == "flat":
        index = faiss.IndexFlatIP(dim)
    elif kind == "hnsw":
        index = faiss.IndexHNSWFlat(dim, params.hnsw_m, faiss.METRIC_INNER_PRODUCT)
        index.hnsw.efConstruction = params.ef_construction
        index.hnsw.efSearch = params.ef_search
    elif kind == "ivf":
        nlist = params.ivf_nlist or max(1, min(n // 39, int(4 * np.sqrt(max(n, 1)))))
        quantizer = faiss.IndexFlatIP(dim)
        index = faiss.IndexIVFFlat(quantizer, dim, nlist, faiss.METRIC_INNER_PRODUCT)
        index.train(vectors)
        index.nprobe = min(params.ivf_nprobe, nlist)
    else:
        raise UserError(f"Unknown index kind {kind!r}; choose flat, hnsw or ivf.")
    if n:
        index.add(vectors)
    return index


@dataclass
class IndexMeta:
    model_id: str
    dimension: int
    normalised: bool
    corpus_hash: str
    doc_sha256: list[str]
    index_kind: str
    built_at: str
    build_seconds: float
    params: dict[str, Any] = field(default_factory=dict)
    version: int = META_VERSION
    faiss_sha256: str = ""  # the sha256 of index.faiss as save_index wrote it; checked by load_index

    @property
    def build_id(self) -> str:
        raw = f"{self.model_id}|{self.corpus_hash}|{self.index_kind}|{json.dumps(self.params, sort_keys=True)}"
        return hashlib.sha256(raw.encode()).hexdigest()[:16]


@dataclass
class VectorIndex:
    """A loaded index: the FAISS object, its metadata, and search over unit query vectors."""

    index: Any
    meta: IndexMeta
    path: Path | None = None

    @property
    def size(self) -> int:
        return int(self.index.ntotal)

    def search(self, queries: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(scores, positions), each (len(queries), k'); k' = min(k, size); -1 positions pad misses."""
        k = max(1, min(k, self.size))
        return self.index.search(normalise_rows(np.atleast_2d(queries)), k)

    def vector(self, position: int) -> np.ndarray:
        return np.asarray(self.index.reconstruct(int(position)), dtype=np.float32)

    def doc_sha(self, position: int) -> str:
        return self.meta.doc_sha256[int(position)]


def build_index(
    doc_shas: Sequence[str], vectors: np.ndarray, *, model_id: str, kind: KindChoice = "auto",
    params: IndexParams | None = None,
) -> VectorIndex:
    if len(doc_shas) != len(vectors):
        raise ValueError("one vector per document is required")
    dim = int(vectors.shape[1]) if vectors.ndim == 2 and len(vectors) else 0
    if not doc_shas:
        raise UserError("The corpus is empty; run `kernelbench-rl corpus ingest` first (or drop --verified-only).")
    chosen = choose_kind(len(doc_shas), kind)
    params = params or IndexParams()
    started = time.perf_counter()
    index = build_faiss(normalise_rows(vectors), chosen, params)
    seconds = time.perf_counter() - started
    used = {"flat": {}, "hnsw": {"M": params.hnsw_m, "efConstruction": params.ef_construction, "efSearch": params.ef_search},
            "ivf": {"nlist": getattr(index, "nlist", None), "nprobe": getattr(index, "nprobe", None)}}[chosen]
    meta = IndexMeta(
        model_id=model_id, dimension=dim, normalised=True, corpus_hash=corpus_hash(doc_shas),
        doc_sha256=list(doc_shas), index_kind=chosen, built_at=datetime.now(timezone.utc).isoformat(timespec="seconds"),
        build_seconds=seconds, params=used,
    )
    return VectorIndex(index=index, meta=meta)


def save_index(index: VectorIndex, folder: str | Path) -> Path:
    import faiss

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    data = faiss.serialize_index(index.index).tobytes()
    index.meta.faiss_sha256 = hashlib.sha256(data).hexdigest()
    (out / INDEX_FILE).write_bytes(data)
    (out / META_FILE).write_text(json.dumps(asdict(index.meta), indent=1, sort_keys=True))
    index.path = out
    return out


def index_exists(folder: str | Path) -> bool:
    """Whether a saved index (vectors and metadata) is in the folder."""
    root = Path(folder)
    return (root / INDEX_FILE).is_file() and (root / META_FILE).is_file()


class IndexDamagedError(DamagedFileError):
    """The saved index (its vectors or its metadata) cannot be read back."""


def index_damage(folder: str | Path) -> str | None:
    """What is wrong with a saved index, in a few words naming the file (None: it loads). The pipeline rebuilds a
    damaged index as it builds a missing one."""
    try:
        load_index(folder)
    except IndexDamagedError as exc:
        return exc.damage
    return None


def _damaged(file: Path, what: str) -> IndexDamagedError:
    error = IndexDamagedError(f"The retrieval index file {file} is damaged ({what}), so rebuild it with "
                              "`kernelbench-rl index build` (the pipeline rebuilds it by itself).")
    error.damage = f"{file}: {what}"
    return error


def load_index(folder: str | Path, *, expected_model_id: str | None = None, expected_dimension: int | None = None) -> VectorIndex:
    """Load an index folder, refusing one built with another model or dimension, or damaged (IndexDamagedError)."""
    import faiss

    root = Path(folder)
    if not (root / INDEX_FILE).exists() or not (root / META_FILE).exists():
        raise UserError(f"No index at {root}; build one with `kernelbench-rl index build`.")
    try:
        meta = IndexMeta(**json.loads((root / META_FILE).read_text()))
    except (TypeError, ValueError) as exc:
        raise _damaged(root / META_FILE, f"unreadable metadata, {type(exc).__name__}") from None
    if expected_model_id is not None and meta.model_id != expected_model_id:
        raise UserError(
            f"The index at {root} was built with model {meta.model_id}, not {expected_model_id}; "
            "rebuild it with `kernelbench-rl index build` or pass the model it was built with."
        )
    if expected_dimension is not None and meta.dimension != expected_dimension:
        raise UserError(
            f"The index at {root} holds {meta.dimension}-dimensional vectors but the model gives "
            f"{expected_dimension}; rebuild the index with this model."
        )
    if meta.corpus_hash != corpus_hash(meta.doc_sha256):
        raise _damaged(root / META_FILE, "its document list does not match its corpus hash")
    try:
        data = (root / INDEX_FILE).read_bytes()
    except OSError as exc:
        raise _damaged(root / INDEX_FILE, f"unreadable, {exc.strerror or type(exc).__name__}") from None
    if not meta.faiss_sha256:
        raise _damaged(root / INDEX_FILE, f"{META_FILE} keeps no checksum of it, as indexes built before checksums "
                                          "were kept")
    if hashlib.sha256(data).hexdigest() != meta.faiss_sha256:
        raise _damaged(root / INDEX_FILE, f"its content does not match the checksum {META_FILE} keeps of it")
    try:
        index = faiss.deserialize_index(np.frombuffer(data, dtype=np.uint8))
    except RuntimeError as exc:  # faiss: a file that matches its checksum yet does not parse
        reason = " ".join(str(exc).split())
        raise _damaged(root / INDEX_FILE, reason.rsplit("Error:", 1)[-1].strip()[:120] or "unreadable") from None
    if index.d != meta.dimension or index.ntotal != len(meta.doc_sha256):
        raise _damaged(root / INDEX_FILE, "it does not match its metadata file")
    if meta.index_kind == "ivf":
        index.make_direct_map()  # so retrieval can read stored vectors back for the near-duplicate check
    if meta.index_kind == "hnsw" and "efSearch" in meta.params:
        index.hnsw.efSearch = int(meta.params["efSearch"])
    if meta.index_kind == "ivf" and meta.params.get("nprobe"):
        index.nprobe = int(meta.params["nprobe"])
    return VectorIndex(index=index, meta=meta, path=root)


def synthetic_clustered_vectors(num: int, dim: int, *, clusters: int = 200, spread: float = 0.35,
                                seed: int = 0) -> np.ndarray:
    """Unit vectors scattered around random centres: a stand-in for real embeddings in benchmarks.

    Uniform noise is the worst case for graph indexes (no neighbourhood structure); embeddings of
    code cluster by operation, which this imitates.
    """
    rng = np.random.default_rng(seed)
    centres = normalise_rows(rng.standard_normal((clusters, dim)).astype(np.float32))
    members = rng.integers(0, clusters, size=num)
    noise = rng.standard_normal((num, dim)).astype(np.float32) * (spread / np.sqrt(dim))
    return normalise_rows(centres[members] + noise)
