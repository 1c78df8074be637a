"""Re-verification of corpus kernels through our own evaluator, and the verified-only index."""

from __future__ import annotations

import rag_fixtures as fx

from kernelbench_rl.problems import get_problem
from kernelbench_rl.rag import ingest_docs, load_own_solutions, load_sakana, read_corpus, reverify_corpus
from kernelbench_rl.rag.verify import match_problem
from kernelbench_rl.store import Store


def test_documents_are_matched_to_bundled_problems_or_skipped_with_reasons(tmp_path):
    store = Store(tmp_path / "v.duckdb")
    ingest_docs(store, load_sakana(fx.write_sakana(tmp_path / "sakana")))
    relu = get_problem("L1/19")
    docs = read_corpus(store)
    assert match_problem(next(d for d in docs if d["kb_task"] == 19), [relu]) == relu
    assert match_problem(next(d for d in docs if d["kb_task"] == 23), [relu]) is None

    def never_called(batch):
        raise AssertionError(f"nothing here can be evaluated, yet {len(batch)} kernels were sent")

    report = reverify_corpus(store, problems=[relu], evaluate=never_called)
    assert report.checked == 0
    # The Sakana ReLU row is a bare C++ extension (no ModelNew); the others are not our problems.
    assert report.skipped == {"kernel_is_not_a_modelnew_module": 1, "pytorch_side_not_a_bundled_problem": len(docs) - 1}
    assert all(d["verified"] is None for d in read_corpus(store))


def test_our_relu_solution_is_reverified_and_only_it_enters_a_verified_only_index(tmp_path):
    from kernelbench_rl.rag import Embedder, build_corpus_index

    store = Store(tmp_path / "v.duckdb")
    ingest_docs(store, load_own_solutions())
    relu = get_problem("L1/19")
    report = reverify_corpus(store, problems=[relu], sources=["solutions"])
    assert (report.checked, report.passed, report.failed) == (1, 1, 0), report
    verified = read_corpus(store, verified_only=True)
    assert [d["origin_id"] for d in verified] == ["solutions:L1/19"]
    assert verified[0]["verdict"].startswith("ok")
    built = build_corpus_index(store, Embedder(), tmp_path / "index", verified_only=True)
    assert built.index.meta.doc_sha256 == [verified[0]["sha256"]]
    assert built.index.meta.params["verified_only"] is True
