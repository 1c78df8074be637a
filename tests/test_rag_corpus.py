"""Corpus loaders and storage, offline, on fixtures built in the hub datasets' exact schemas."""

from __future__ import annotations

import json

import pytest
import rag_fixtures as fx

from kernelbench_rl.errors import UserError
from kernelbench_rl.problems import get_problem, list_solutions, load_solution
from kernelbench_rl.rag import (
    code_sha256,
    ingest_docs,
    load_kernelbook,
    load_own_solutions,
    load_sakana,
    normalise_code,
    read_corpus,
)
from kernelbench_rl.rag.normalize import forward_fingerprint, operator_names
from kernelbench_rl.rag.corpus import DEFAULT_SPEEDUP_CAP, CorpusDoc, KERNELBOOK_REVISION, LoadedCorpus, LoadStats
from kernelbench_rl.store import Store


@pytest.fixture(scope="module")
def kernelbook_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("kernelbook")
    return {fmt: fx.write_kernelbook(root / fmt, fmt) for fmt in ("disk", "parquet")}


@pytest.fixture(scope="module")
def sakana_dirs(tmp_path_factory):
    root = tmp_path_factory.mktemp("sakana")
    return {fmt: fx.write_sakana(root / fmt, fmt) for fmt in ("disk", "parquet")}


# -- normalisation ----------------------------------------------------------------------------------
def test_normalised_hash_ignores_comments_and_layout_but_not_code():
    a = "import torch\n\n\ndef f(x):\n    # double it\n    return x * 2\n"
    b = "import torch\ndef f(x):\n        return x*2   # same thing\n"
    c = "import torch\ndef f(x):\n    return x * 3\n"
    assert code_sha256(a) == code_sha256(b)
    assert code_sha256(a) != code_sha256(c)
    cuda_a = "#include <cuda.h>\n// first\n__global__ void k(float* x) { x[0] = 1.f; /* block */ }\n"
    cuda_b = "#include <cuda.h>\n__global__ void k(float* x)\n{\n  x[0] = 1.f;\n}\n"
    assert normalise_code(cuda_a) == normalise_code(cuda_b)
    assert "#include" in normalise_code(cuda_a)  # preprocessor lines are code, not comments


def test_forward_fingerprint_sees_through_copies_but_not_other_operators():
    bundled_style = fx.SOFTMAX_PROBLEM_SOURCE.replace("super(Model, self).__init__()", "super().__init__()").replace(
        "Simple model that performs a Softmax activation.", "Softmax over rows.\n\n    Sizes are kept small.")
    renamed_sizes = bundled_style.replace("dim = 16384", "dim = 4096") + "\nKBRL_SMALL_SIZES = {'dim': 8}\n"
    assert forward_fingerprint(fx.SOFTMAX_PROBLEM_SOURCE) == forward_fingerprint(renamed_sizes)
    assert forward_fingerprint(fx.SOFTMAX_PROBLEM_SOURCE) != forward_fingerprint(fx.RELU_PROBLEM_SOURCE)
    assert forward_fingerprint("def f(:") is None and forward_fingerprint("x = 1") is None


def test_operator_names_name_what_a_module_computes():
    assert operator_names(fx.SOFTMAX_PROBLEM_SOURCE) == {"softmax"}
    assert operator_names(fx.CONV_PROBLEM_SOURCE) == {"conv2d"}
    assert operator_names(fx.GEMM_SOFTMAX_SOURCE) == {"linear", "gemm", "softmax"}
    assert "matmul" in operator_names("class M:\n    def forward(self, a, b):\n        return a @ b\n")


# -- KernelBook -------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["disk", "parquet"])
def test_kernelbook_loader_keeps_good_rows_and_counts_bad_ones(kernelbook_dirs, fmt):
    loaded = load_kernelbook(kernelbook_dirs[fmt])
    assert loaded.stats.rows == len(fx.kernelbook_rows())
    assert loaded.stats.kept == len(loaded.docs) == fx.KERNELBOOK_GOOD
    assert dict(loaded.stats.skipped) == fx.KERNELBOOK_SKIPS
    assert len({d.sha256 for d in loaded.docs}) == len(loaded.docs)
    first = next(d for d in loaded.docs if d.title == "SoftmaxLayer")
    assert first.backend == "triton" and first.source == "kernelbook"
    assert first.licence == "MIT" and first.origin_id == "kernelbook:1"
    assert first.kb_level is None and first.kb_task is None  # KernelBook rows carry no KernelBench ids
    assert "F.softmax" in first.pytorch_code and "@triton.jit" in first.kernel_code
    assert first.sha256 == code_sha256(first.kernel_code)


def test_kernelbook_limit_and_pinned_revision(kernelbook_dirs):
    loaded = load_kernelbook(kernelbook_dirs["disk"], limit=3)
    assert len(loaded.docs) == 3
    assert len(KERNELBOOK_REVISION) == 40 and all(ch in "0123456789abcdef" for ch in KERNELBOOK_REVISION)


def test_loader_refuses_wrong_schema_and_missing_path(tmp_path, sakana_dirs):
    with pytest.raises(UserError, match="lacks the column"):
        load_kernelbook(sakana_dirs["disk"] / "level_1")  # a Sakana split is not KernelBook
    with pytest.raises(UserError, match="does not exist"):
        load_kernelbook(tmp_path / "nowhere")


# -- Sakana -----------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["disk", "parquet"])
def test_sakana_loader_filters_caps_and_counts(sakana_dirs, fmt):
    loaded = load_sakana(sakana_dirs[fmt])
    assert loaded.stats.rows == sum(len(rows) for rows in fx.sakana_rows().values())
    assert len(loaded.docs) == sum(fx.SAKANA_GOOD.values())
    assert dict(loaded.stats.skipped) == fx.SAKANA_SKIPS
    assert loaded.stats.notes["speedup_capped"] == 1
    assert all(d.backend == "cuda" and d.licence for d in loaded.docs)
    assert all(d.meta.get("Correct") is True for d in loaded.docs)
    tasks = {(d.kb_level, d.kb_task) for d in loaded.docs}
    assert tasks == {(1, 23), (1, 19), (1, 1), (1, 63), (1, 10), (2, 23)}
    conv = next(d for d in loaded.docs if d.kb_task == 63)
    assert conv.speedup == DEFAULT_SPEEDUP_CAP and conv.meta["speedup_raw"] == 1e6
    assert all(d.speedup is not None and d.speedup <= DEFAULT_SPEEDUP_CAP for d in loaded.docs)


def test_sakana_options_select_levels_keep_incorrect_and_drop_outliers(sakana_dirs):
    only_two = load_sakana(sakana_dirs["disk"], levels=[2])
    assert {d.kb_level for d in only_two.docs} == {2} and only_two.stats.rows == len(fx.sakana_rows()["level_2"])
    with_incorrect = load_sakana(sakana_dirs["parquet"], correct_only=False)
    assert "not_correct" not in with_incorrect.stats.skipped
    assert len(with_incorrect.docs) == len(load_sakana(sakana_dirs["parquet"]).docs) + 2
    dropped = load_sakana(sakana_dirs["disk"], outliers="drop")
    assert dropped.stats.skipped["speedup_outlier"] == 1
    assert all(d.kb_task != 63 for d in dropped.docs)
    with pytest.raises(UserError):
        load_sakana(sakana_dirs["disk"], levels=[4])


# -- our solutions ------------------------------------------------------------------------------------
def test_own_solutions_pair_each_kernel_with_its_bundled_problem():
    loaded = load_own_solutions()
    assert loaded.docs, "KernelBench/solutions/ should hold at least the ReLU solution"
    solved = {pid for pid, _ in list_solutions()}
    for doc in loaded.docs:
        problem_id = f"L{doc.kb_level}/{doc.kb_task}"
        assert problem_id in solved
        assert doc.pytorch_code == get_problem(problem_id).source
        assert doc.backend == "triton" and "class ModelNew" in doc.kernel_code
    assert loaded.stats.rows == len(solved)
    assert loaded.stats.kept + sum(loaded.stats.skipped.values()) == loaded.stats.rows


def test_solutions_without_a_bundled_problem_are_skipped_with_a_reason(tmp_path):
    orphan = tmp_path / "7_Nothing.py"
    orphan.write_text("class ModelNew:\n    pass\n")
    loaded = load_own_solutions(solutions=[("L3/49", orphan)])
    assert loaded.docs == [] and loaded.stats.skipped["no_bundled_problem"] == 1


# -- storage ----------------------------------------------------------------------------------------
def test_ingest_stores_each_kernel_once_across_sources_and_is_idempotent(tmp_path, kernelbook_dirs, sakana_dirs):
    store = Store(tmp_path / "corpus.duckdb")
    relu_problem = get_problem("L1/19")
    relu_solution = load_solution(relu_problem)
    # The same ReLU kernel arriving from KernelBook, re-commented and re-indented.
    copied = "# copied from elsewhere\n" + relu_solution.replace("    ", "  ")
    stats = LoadStats("kernelbook")
    copy_doc = CorpusDoc(sha256=code_sha256(copied), source="kernelbook", revision="r", backend="triton", licence="MIT",
                         origin_id="kernelbook:999", pytorch_code=relu_problem.source, kernel_code=copied)
    first = ingest_docs(store, load_own_solutions())
    second = ingest_docs(store, LoadedCorpus([copy_doc], stats))
    assert first.inserted == first.stats.kept and second.inserted == 0 and second.already_stored == 1
    relu_rows = [d for d in read_corpus(store) if d["sha256"] == code_sha256(relu_solution)]
    assert len(relu_rows) == 1 and relu_rows[0]["source"] == "solutions"

    for loaded in (load_kernelbook(kernelbook_dirs["disk"]), load_sakana(sakana_dirs["disk"])):
        ingest_docs(store, loaded)
    count = store.count("corpus_docs")
    again = ingest_docs(store, load_sakana(sakana_dirs["parquet"]))
    assert again.inserted == 0 and store.count("corpus_docs") == count

    stored = {d["origin_id"]: d for d in read_corpus(store)}
    sakana_softmax = next(d for k, d in stored.items() if k.startswith("sakana:L1/23"))
    assert (sakana_softmax["kb_level"], sakana_softmax["kb_task"]) == (1, 23)
    assert json.loads(sakana_softmax["meta_json"])["Op_Name"] == "23_Softmax"
    assert sakana_softmax["verified"] is None
    assert all(d["backend"] == "cuda" for d in read_corpus(store, backend="cuda"))
