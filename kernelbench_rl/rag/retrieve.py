"""Leak-free retrieval of worked examples for a problem.

An example is never shown if it
- solves the problem being asked or any holdout problem (its KernelBench level/task, known for
  Sakana rows and our own solutions, is one of theirs), or
- has a PyTorch side that is a near-duplicate of the asked problem's reference or of any holdout
  problem's reference (catches copies without level/task labels, e.g. a KernelBench module that
  found its way into KernelBook): cosine >= 0.95 between embeddings, or the same `__init__` and
  `forward` code (`normalize.forward_fingerprint`). The second test exists because a copy whose
  docstring was rewritten can fall to ~0.87 cosine with MiniLM while computing the same thing.
Examples are filtered by backend and must fit a character budget each.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import numpy as np

from kernelbench_rl.config.schema import RagConfig
from kernelbench_rl.envs.prompts import PromptExample
from kernelbench_rl.problems import Problem, holdout_ids, load_problems, parse_problem_id
from kernelbench_rl.rag.corpus import read_corpus
from kernelbench_rl.rag.embed import Embedder, embed_cached
from kernelbench_rl.rag.index import VectorIndex, load_index
from kernelbench_rl.rag.normalize import code_sha256, forward_fingerprint, operator_names

NEAR_DUPLICATE_COSINE = 0.95
DEFAULT_CHAR_BUDGET = 6000
# Ranking score = cosine + LEXICAL_WEIGHT * Jaccard(operator names of problem, of example); 0 disables.
LEXICAL_WEIGHT = 0.1


@dataclass
class RetrievedExample:
    doc_sha256: str
    score: float  # ranking score: cosine + LEXICAL_WEIGHT * operator-name overlap
    source: str
    backend: str
    title: str
    origin_id: str
    pytorch_code: str
    kernel_code: str
    licence: str | None = None
    kb_level: int | None = None
    kb_task: int | None = None
    speedup: float | None = None
    verified: bool | None = None
    truncated: bool = False
    cosine: float = 0.0  # between the problem's reference and the example's PyTorch side

    def as_prompt_example(self) -> PromptExample:
        return PromptExample(pytorch_code=self.pytorch_code, kernel_code=self.kernel_code, backend=self.backend,
                             title=self.title, source=self.source)


@dataclass
class RetrievalTrace:
    """Why candidates were passed over (for the CLI and for tests of the leak filter)."""

    excluded: Counter[str] = field(default_factory=Counter)
    considered: int = 0


def _truncate(code: str, limit: int) -> str:
    if len(code) <= limit:
        return code
    cut = code[:limit].rsplit("\n", 1)[0]
    return cut + "\n# ... (truncated)\n"


class Retriever:
    """Top-k examples for a problem from a built index, with the leak filter applied."""

    def __init__(
        self,
        index: VectorIndex,
        docs: Mapping[str, Mapping[str, Any]],
        embedder: Embedder,
        *,
        holdout_problems: Sequence[Problem] = (),
        near_duplicate_cosine: float = NEAR_DUPLICATE_COSINE,
        lexical_weight: float = LEXICAL_WEIGHT,
        store: Any = None,
        extra_holdout_ids: Collection[str] = (),
    ) -> None:
        if index.meta.model_id != embedder.model_id:
            from kernelbench_rl.errors import UserError

            raise UserError(f"The index was built with {index.meta.model_id} but the embedder is {embedder.model_id}; use the same model.")
        self.index = index
        self.docs = docs
        self.embedder = embedder
        self.store = store
        self.near_duplicate_cosine = near_duplicate_cosine
        self.lexical_weight = lexical_weight
        self.guard = HoldoutGuard(embedder, holdout_problems, store=store, extra_holdout_ids=extra_holdout_ids,
                                  near_duplicate_cosine=near_duplicate_cosine)
        self.holdout_ids = self.guard.holdout_ids
        self._ops: dict[str, frozenset[str]] = {}

    @classmethod
    def open(
        cls,
        store: Any,
        index_dir: str | Path,
        embedder: Embedder,
        *,
        holdout_problems: Sequence[Problem] | None = None,
        kernelbench_root: str | None = None,
        holdout_fraction: float = 0.2,
        split_seed: int = 0,
        near_duplicate_cosine: float = NEAR_DUPLICATE_COSINE,
        lexical_weight: float = LEXICAL_WEIGHT,
        kernelbench_universe: bool = True,
    ) -> Retriever:
        """Load the index (refusing another model's), its documents, and the holdout set.

        The holdout defaults to `kernelbench_rl.problems.split` over the problem set in use. With
        `kernelbench_universe`, every KernelBench id (levels 1-3) the same split would hold out is
        excluded too: the split hashes ids, so a task held out of the full benchmark stays held out
        when a later run evaluates on a KernelBench checkout, and its Sakana rows must never have
        been shown in training.
        """
        index = load_index(index_dir, expected_model_id=embedder.model_id, expected_dimension=embedder.dimension)
        wanted = set(index.meta.doc_sha256)
        docs = {d["sha256"]: d for d in read_corpus(store) if d["sha256"] in wanted}
        if holdout_problems is None:
            holdout_problems = split_holdout_problems(kernelbench_root, holdout_fraction, split_seed)
        extra = kernelbench_holdout_ids(holdout_fraction, split_seed) if kernelbench_universe else set()
        return cls(index, docs, embedder, holdout_problems=holdout_problems, near_duplicate_cosine=near_duplicate_cosine,
                   lexical_weight=lexical_weight, store=store, extra_holdout_ids=extra)

    def exclusion_reason(
        self, doc: Mapping[str, Any], vector: np.ndarray, problem: Problem, problem_vector: np.ndarray,
        backend: str | None, problem_fingerprint: str | None = None,
    ) -> str | None:
        """Why a document may not be shown for this problem, or None if it may."""
        if backend is not None and doc.get("backend") != backend:
            return "other_backend"
        task = (doc.get("kb_level"), doc.get("kb_task"))
        if task == (problem.level, problem.number):
            return "same_problem"
        if task in self.holdout_ids:
            return "holdout_problem"
        fingerprint = self.guard.fingerprint(doc)
        if float(vector @ problem_vector) >= self.near_duplicate_cosine or (
            fingerprint is not None and fingerprint == problem_fingerprint
        ):
            return "near_duplicate_of_problem"
        return self.guard.leak_reason(doc, vector)

    def retrieve(
        self,
        problem: Problem,
        backend: str | None = "triton",
        k: int = 3,
        *,
        char_budget: int = DEFAULT_CHAR_BUDGET,
        overflow: Literal["skip", "truncate"] = "skip",
        trace: RetrievalTrace | None = None,
        query_vector: np.ndarray | None = None,
    ) -> list[RetrievedExample]:
        """The k most similar allowed examples, best first; each fits `char_budget` characters.

        overflow="skip" passes over an example longer than the budget (a cut kernel teaches
        little); "truncate" shortens its kernel code instead. `query_vector` (the problem source's
        embedding) saves embedding it again when the caller already has it.
        """
        trace = trace if trace is not None else RetrievalTrace()
        if k <= 0 or self.index.size == 0:
            return []
        query = query_vector if query_vector is not None else self.embedder.embed_code([problem.source])[0]
        problem_fingerprint = forward_fingerprint(problem.source)
        problem_ops = operator_names(problem.source)
        allowed: list[RetrievedExample] = []
        seen: set[int] = set()
        depth = min(self.index.size, max(64, 20 * k))
        while True:
            # Rank within the window of the `depth` nearest by cosine; deepen while too few are allowed.
            scores, positions = self.index.search(query[None, :], depth)
            for cosine, position in zip(scores[0], positions[0]):
                if position < 0 or position in seen:
                    continue
                seen.add(int(position))
                trace.considered += 1
                doc = self.docs.get(self.index.doc_sha(position))
                if doc is None:
                    trace.excluded["not_in_store"] += 1
                    continue
                reason = self.exclusion_reason(doc, self.index.vector(position), problem, query, backend,
                                               problem_fingerprint)
                if reason is None:
                    example = self._fit(doc, float(cosine), char_budget, overflow)
                    if example is None:
                        reason = "over_budget"
                    else:
                        sha = doc["sha256"]
                        if sha not in self._ops:
                            self._ops[sha] = operator_names(doc["pytorch_code"])
                        example.score = example.cosine + self.lexical_weight * _jaccard(problem_ops, self._ops[sha])
                        allowed.append(example)
                if reason is not None:
                    trace.excluded[reason] += 1
            if len(allowed) >= k or depth >= self.index.size:
                allowed.sort(key=lambda e: -e.score)
                return allowed[:k]
            depth = min(self.index.size, depth * 4)

    @staticmethod
    def _fit(doc: Mapping[str, Any], cosine: float, budget: int, overflow: str) -> RetrievedExample | None:
        pytorch_code, kernel_code = doc["pytorch_code"], doc["kernel_code"]
        truncated = False
        if len(pytorch_code) + len(kernel_code) > budget:
            room = budget - len(pytorch_code)
            if overflow != "truncate" or room < budget // 4:
                return None
            kernel_code, truncated = _truncate(kernel_code, room), True
        return RetrievedExample(
            doc_sha256=doc["sha256"], score=cosine, cosine=cosine, source=doc["source"], backend=doc["backend"],
            title=doc.get("title") or "", origin_id=doc.get("origin_id") or "", pytorch_code=pytorch_code,
            kernel_code=kernel_code, licence=doc.get("licence"), kb_level=doc.get("kb_level"),
            kb_task=doc.get("kb_task"), speedup=doc.get("speedup"), verified=doc.get("verified"), truncated=truncated,
        )


class HoldoutGuard:
    """The holdout half of the leak rules, for anything that shows corpus kernels to the policy.

    Retrieval (per problem, beside its own same-problem rules) and the SFT warm start (a document
    is trained on or not) both ask it: a document may not be shown if it solves a holdout problem
    (its KernelBench level/task), or if its PyTorch side is a near-duplicate of a holdout reference
    (cosine >= 0.95, or the same `__init__`/`forward` code).
    """

    def __init__(
        self,
        embedder: Embedder,
        holdout_problems: Sequence[Problem],
        *,
        store: Any = None,
        extra_holdout_ids: Collection[str] = (),
        near_duplicate_cosine: float = NEAR_DUPLICATE_COSINE,
    ) -> None:
        self.embedder = embedder
        self.store = store
        self.near_duplicate_cosine = near_duplicate_cosine
        self.holdout_ids: set[tuple[int, int]] = {(p.level, p.number) for p in holdout_problems}
        self.holdout_ids |= {parse_problem_id(i) for i in extra_holdout_ids}
        self.holdout_vectors = self._embed_problems(holdout_problems)
        self.holdout_fingerprints = {fp for p in holdout_problems if (fp := forward_fingerprint(p.source))}
        self.fingerprints: dict[str, str | None] = {}

    @classmethod
    def for_split(
        cls, store: Any, embedder: Embedder, *, kernelbench_root: str | None = None, holdout_fraction: float = 0.2,
        split_seed: int = 0, kernelbench_universe: bool = True,
    ) -> HoldoutGuard:
        """The guard for the configured split, the way `Retriever.open` builds its own."""
        extra = kernelbench_holdout_ids(holdout_fraction, split_seed) if kernelbench_universe else set()
        return cls(embedder, split_holdout_problems(kernelbench_root, holdout_fraction, split_seed), store=store,
                   extra_holdout_ids=extra)

    def _embed_problems(self, problems: Sequence[Problem]) -> np.ndarray:
        if not problems:
            return np.zeros((0, self.embedder.dimension), dtype=np.float32)
        texts = {code_sha256(p.source): p.source for p in problems}
        if self.store is not None:
            vectors, _ = embed_cached(self.store, self.embedder, texts)
            return np.stack([vectors[s] for s in texts])
        return self.embedder.embed_code(list(texts.values()))

    def fingerprint(self, doc: Mapping[str, Any]) -> str | None:
        sha = doc["sha256"]
        if sha not in self.fingerprints:
            self.fingerprints[sha] = forward_fingerprint(doc.get("pytorch_code") or "")
        return self.fingerprints[sha]

    def leak_reason(self, doc: Mapping[str, Any], vector: np.ndarray) -> str | None:
        """"holdout_problem", "near_duplicate_of_holdout", or None when the document may be shown."""
        if (doc.get("kb_level"), doc.get("kb_task")) in self.holdout_ids:
            return "holdout_problem"
        if len(self.holdout_vectors) and float((self.holdout_vectors @ vector).max()) >= self.near_duplicate_cosine:
            return "near_duplicate_of_holdout"
        fingerprint = self.fingerprint(doc)
        if fingerprint is not None and fingerprint in self.holdout_fingerprints:
            return "near_duplicate_of_holdout"
        return None


def open_retriever(settings: RagConfig, store: Any, *, backend: str, kernelbench_root: str | None,
                   holdout_fraction: float, split_seed: int) -> Callable[[Problem, int], list[PromptExample]] | None:
    """A run's RA-ICL examples as its prompts take them (`retrieve(problem, k)`), from the index built beside `store`
    (or `settings.index_dir`), leak-free against the holdout of the run's problem source split as the run splits it;
    None when retrieval is off (`settings.enabled`)."""
    if not settings.enabled:
        return None
    from kernelbench_rl.rag.build import default_index_dir

    retriever = Retriever.open(store, settings.index_dir or default_index_dir(store), Embedder(settings.model),
                               kernelbench_root=kernelbench_root, holdout_fraction=holdout_fraction,
                               split_seed=split_seed)
    char_budget = settings.char_budget

    def retrieve(problem: Problem, k: int) -> list[PromptExample]:
        return [ex.as_prompt_example() for ex in retriever.retrieve(problem, backend, k, char_budget=char_budget)]

    return retrieve


def split_holdout_problems(kernelbench_root: str | None, holdout_fraction: float, split_seed: int) -> list[Problem]:
    """The holdout problems of the problem set in use (`kernelbench_rl.problems.split`)."""
    problems = load_problems(kernelbench_root)
    held = holdout_ids(problems, holdout_fraction, split_seed)
    return [p for p in problems if p.id in held]


KERNELBENCH_TASKS_PER_LEVEL = {1: 100, 2: 100, 3: 50}


def kernelbench_holdout_ids(holdout_fraction: float = 0.2, split_seed: int = 0) -> set[str]:
    """The ids of KernelBench levels 1-3 that `holdout_ids` holds out (it needs only the ids)."""
    stubs = [Problem(level=level, number=number, name="", source="", origin="inline")
             for level, count in KERNELBENCH_TASKS_PER_LEVEL.items() for number in range(1, count + 1)]
    return holdout_ids(stubs, holdout_fraction, split_seed)


def _jaccard(a: frozenset[str], b: frozenset[str]) -> float:
    return len(a & b) / len(a | b) if a or b else 0.0

