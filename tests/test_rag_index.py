"""FAISS index: kind selection, exact vs approximate agreement, saving without pickles, refusals."""

from __future__ import annotations

import json

import numpy as np
import pytest

from kernelbench_rl.errors import UserError
from kernelbench_rl.rag.index import (
    AUTO_APPROX_ABOVE,
    INDEX_FILE,
    META_FILE,
    IndexParams,
    build_index,
    choose_kind,
    corpus_hash,
    load_index,
    save_index,
    synthetic_clustered_vectors,
)

MODEL = "test-model#sha256:0123"


def _shas(n: int) -> list[str]:
    return [f"{i:064x}" for i in range(n)]


def test_kind_is_chosen_by_size_and_overridable():
    assert choose_kind(10) == "flat"
    assert choose_kind(AUTO_APPROX_ABOVE + 1) == "hnsw"
    assert choose_kind(10, "hnsw") == "hnsw" and choose_kind(10**6, "flat") == "flat"
    with pytest.raises(UserError):
        choose_kind(10, "annoy")  # type: ignore[arg-type]


def test_flat_search_is_exact_cosine_on_unnormalised_input():
    rng = np.random.default_rng(1)
    raw = rng.standard_normal((50, 16)).astype(np.float32) * rng.uniform(0.1, 10, size=(50, 1)).astype(np.float32)
    index = build_index(_shas(50), raw, model_id=MODEL)
    assert index.meta.index_kind == "flat" and index.meta.normalised
    unit = raw / np.linalg.norm(raw, axis=1, keepdims=True)
    query = raw[7] * 3.0
    scores, positions = index.search(query, 5)
    expected = np.argsort(-(unit @ (query / np.linalg.norm(query))))[:5]
    assert positions[0].tolist() == expected.tolist()
    assert scores[0][0] == pytest.approx(1.0, abs=1e-5)


@pytest.mark.parametrize("kind", ["hnsw", "ivf"])
def test_approximate_indexes_agree_with_exact_on_clustered_vectors(kind):
    vectors = synthetic_clustered_vectors(4000, 64, clusters=40, seed=3)
    queries = synthetic_clustered_vectors(100, 64, clusters=40, seed=3)[:100]
    exact = build_index(_shas(len(vectors)), vectors, model_id=MODEL, kind="flat")
    approx = build_index(_shas(len(vectors)), vectors, model_id=MODEL, kind=kind,
                         params=IndexParams(ef_search=64, ivf_nprobe=8))
    assert approx.meta.index_kind == kind
    _, truth = exact.search(queries, 10)
    _, found = approx.search(queries, 10)
    recall = np.mean([len(set(t) & set(f)) / 10 for t, f in zip(truth, found)])
    assert recall >= 0.9


@pytest.mark.parametrize("kind", ["flat", "hnsw", "ivf"])
def test_save_and_load_round_trip_without_pickles(tmp_path, kind):
    vectors = synthetic_clustered_vectors(2000, 32, clusters=20, seed=5)
    shas = _shas(len(vectors))
    index = build_index(shas, vectors, model_id=MODEL, kind=kind)
    folder = save_index(index, tmp_path / "idx")
    assert sorted(p.name for p in folder.iterdir()) == sorted([INDEX_FILE, META_FILE])
    assert not (folder / INDEX_FILE).read_bytes().startswith(b"\x80")  # not a pickle stream
    meta = json.loads((folder / META_FILE).read_text())
    assert meta["model_id"] == MODEL and meta["dimension"] == 32 and meta["normalised"] is True
    assert meta["corpus_hash"] == corpus_hash(shas) and meta["doc_sha256"] == shas
    assert meta["index_kind"] == kind and meta["built_at"] and meta["build_seconds"] >= 0
    loaded = load_index(folder, expected_model_id=MODEL, expected_dimension=32)
    assert loaded.size == len(vectors) and loaded.doc_sha(5) == shas[5]
    np.testing.assert_allclose(loaded.vector(5), vectors[5], atol=1e-5)
    q = vectors[:3]
    assert loaded.search(q, 4)[1].tolist() == index.search(q, 4)[1].tolist()


def test_loading_refuses_another_model_or_dimension_with_one_sentence(tmp_path):
    vectors = synthetic_clustered_vectors(20, 8, clusters=2)
    folder = save_index(build_index(_shas(20), vectors, model_id=MODEL), tmp_path / "idx")
    with pytest.raises(UserError, match="was built with model test-model") as err:
        load_index(folder, expected_model_id="BAAI/bge-code-v1")
    assert str(err.value).count(". ") == 0 and str(err.value).endswith(".")
    with pytest.raises(UserError, match="8-dimensional"):
        load_index(folder, expected_model_id=MODEL, expected_dimension=384)
    with pytest.raises(UserError, match="No index"):
        load_index(tmp_path / "missing")


def test_empty_corpus_is_a_user_error():
    with pytest.raises(UserError, match="corpus is empty"):
        build_index([], np.zeros((0, 8), np.float32), model_id=MODEL)
