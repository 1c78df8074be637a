"""The answer log of a served model's evaluation (training/model_answers.py) read and written directly, in this
process: a request's digest is pinned (an evaluation interrupted before an upgrade resumes after it), which earlier
evaluation is resumed (the newest of its run, model and split, only while unfinished), an earlier answer comes back
as it was paid for (its finish reason, token counts and budget; NULLs as none), every answer's rows as it arrives,
and the error of a partial report."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
from kernelbench_rl.policy.openai_backend import ChatAnswer
from kernelbench_rl.store import Store
from kernelbench_rl.training.model_answers import AnswerLog, ServedModel, UnansweredRequests, request_sha256

MESSAGES = [{"role": "system", "content": "écris un noyau → vite"}, {"role": "user", "content": "relu"}]


def test_a_requests_digest_is_pinned_across_versions() -> None:
    """The digests stored by this version must still be this version's next time (else a resumed evaluation resends
    what it paid for): non-ASCII text kept as it is, keys sorted, the budget only when the request carries one."""
    assert request_sha256("m", MESSAGES, 0.7, 1.0) == (
        "1e5fab216d9ef8410711a14d9f202c31e43621c1e9e02d0190608c13e256a92a")
    assert request_sha256("m", MESSAGES, 0.7, 1.0, None) == request_sha256("m", MESSAGES, 0.7, 1.0)
    assert request_sha256("m", MESSAGES, 0.7, 1.0, 2048) == (
        "bd1fcfcafe45d2154ea4372cf1347b4b6f2633e3a28217875ae72e13ef95e41d")
    assert request_sha256("m", MESSAGES, 0.7, 1.0, 2049) != request_sha256("m", MESSAGES, 0.7, 1.0, 2048)


# -- fakes of what the log reads of an environment ----------------------------------------------------------------
def env(problem_id: str = "L1/19", *, turns: int = 1, completion: str = "an answer", result: EvalResult | None = None,
        format_ok: bool = True) -> SimpleNamespace:
    problem = SimpleNamespace(id=problem_id, suite="kernelbench", level=1)
    done = [SimpleNamespace(index=i, completion=completion, result=result, format_ok=format_ok) for i in range(turns)]
    return SimpleNamespace(problem=problem, turns=done)


def log_of(store: Store, **kw) -> AnswerLog:
    options = {"temperature": 0.7, "top_p": 1.0, **kw}
    return AnswerLog(store, "run", "openai:m", "holdout", "m", **options)


def answer_row(store: Store, eval_id: str, *, sample: int = 0, turn: int = 0, request: str = "r", created: str,
               text: str = "earlier text", **columns) -> None:
    (digest,) = store.put_texts("completion", [text])
    store.upsert("model_answers", [{
        "eval_id": eval_id, "run_id": "run", "checkpoint": "openai:m", "split": "holdout", "problem_id": "L1/19",
        "sample_index": sample, "turn": turn, "request_sha256": request, "completion_sha256": digest,
        "created_at": created, **columns}])


@pytest.fixture
def store(tmp_path) -> Store:
    store = Store(tmp_path / "kb.duckdb")
    store.init()
    return store


# -- which evaluation is resumed ------------------------------------------------------------------------------------
def test_nothing_to_resume_in_an_empty_store(store) -> None:
    log = log_of(store)
    assert log.resume() is None and log.eval_id is None and log.earlier_answers == 0


def test_the_newest_unfinished_evaluation_is_resumed_with_its_answers(store) -> None:
    answer_row(store, "old", created="2026-01-01 10:00:00")
    answer_row(store, "new", created="2026-01-02 10:00:00", sample=0)
    answer_row(store, "new", created="2026-01-02 10:00:01", sample=1)
    log = log_of(store)
    assert log.resume() == "new" and log.eval_id == "new" and log.earlier_answers == 2


@pytest.mark.parametrize("metrics_json", ["{}", None, json.dumps({"usage": {"requests": 4}}),
                                          json.dumps({"usage": {"unanswered": 0}})])
def test_an_evaluation_with_a_whole_report_is_finished_and_not_resumed(store, metrics_json) -> None:
    answer_row(store, "done", created="2026-01-01 10:00:00")
    store.upsert("eval_reports", [{"report_id": "done|all", "eval_id": "done", "level": None,
                                   "metrics_json": metrics_json}])
    log = log_of(store)
    assert log.resume() is None and log.eval_id is None and log.earlier_answers == 0


def test_an_evaluation_whose_report_tells_unanswered_requests_is_resumed(store) -> None:
    answer_row(store, "partial", created="2026-01-01 10:00:00")
    store.upsert("eval_reports", [
        {"report_id": "partial|all", "eval_id": "partial", "level": None,
         "metrics_json": json.dumps({"usage": {"unanswered": 3}})},
        {"report_id": "partial|1", "eval_id": "partial", "level": 1, "metrics_json": "{}"}])  # a level's row: no say
    assert log_of(store).resume() == "partial"


def test_another_run_model_or_split_is_not_resumed(store) -> None:
    answer_row(store, "e", created="2026-01-01 10:00:00")
    for other in ({"run_id": "other"}, {"label": "openai:other"}, {"split": "train"}):
        log = AnswerLog(store, other.get("run_id", "run"), other.get("label", "openai:m"), other.get("split", "holdout"),
                        "m", temperature=0.7, top_p=1.0)
        assert log.resume() is None, other


# -- an earlier answer, as it was paid for ---------------------------------------------------------------------------
def test_an_earlier_answer_comes_back_whole_for_the_same_request_only(store) -> None:
    log = log_of(store, budget=lambda messages: 512)
    request = request_sha256("m", MESSAGES, 0.7, 1.0, 512)
    answer_row(store, "e", request=request, created="2026-01-01 10:00:00", finish_reason="length",
               prompt_tokens=11, completion_tokens=512, max_tokens=512)
    assert log.resume() == "e"
    assert log.earlier(env(turns=0), 0, MESSAGES) == ChatAnswer("earlier text", "length", 11, 512, 512)
    assert log.earlier(env(turns=0), 1, MESSAGES) is None  # another sample
    assert log.earlier(env(turns=1), 0, MESSAGES) is None  # another turn
    assert log.earlier(env("L1/21", turns=0), 0, MESSAGES) is None  # another problem
    assert log.earlier(env(turns=0), 0, MESSAGES[:1]) is None  # another prompt


def test_an_earlier_answer_with_nothing_recorded_of_its_cost_reads_as_none(store) -> None:
    log = log_of(store)
    answer_row(store, "e", request=request_sha256("m", MESSAGES, 0.7, 1.0), created="2026-01-01 10:00:00")
    log.resume()
    assert log.earlier(env(turns=0), 0, MESSAGES) == ChatAnswer("earlier text", "", 0, 0, None)


def test_a_budget_that_changed_since_the_answer_is_another_request(store) -> None:
    answer_row(store, "e", request=request_sha256("m", MESSAGES, 0.7, 1.0, 512), created="2026-01-01 10:00:00",
               max_tokens=512)
    log = log_of(store, budget=lambda messages: 2048)
    log.resume()
    assert log.earlier(env(turns=0), 0, MESSAGES) is None
    log = log_of(store, budget=lambda messages: 512)
    log.resume()
    assert log.earlier(env(turns=0), 0, MESSAGES) is not None


# -- each answer's rows as it arrives ----------------------------------------------------------------------------------
def test_each_answer_is_recorded_with_its_request_and_a_pending_sample(store) -> None:
    log = log_of(store, budget=lambda messages: 512)
    log.eval_id = "e"
    sample = env(turns=0)
    assert log.earlier(sample, 2, MESSAGES) is None  # asked before the request is sent: its digest is kept
    sample.turns.append(SimpleNamespace(index=0, completion="new answer", result=None, format_ok=False))
    log.record(sample, 2, ChatAnswer("new answer", "stop", 9, 3, 512))
    [answer] = store.dicts("SELECT * FROM model_answers")
    assert {k: answer[k] for k in ("eval_id", "run_id", "checkpoint", "split", "problem_id", "sample_index", "turn",
                                   "request_sha256", "finish_reason", "prompt_tokens", "completion_tokens",
                                   "max_tokens")} == {
        "eval_id": "e", "run_id": "run", "checkpoint": "openai:m", "split": "holdout", "problem_id": "L1/19",
        "sample_index": 2, "turn": 0, "request_sha256": request_sha256("m", MESSAGES, 0.7, 1.0, 512),
        "finish_reason": "stop", "prompt_tokens": 9, "completion_tokens": 3, "max_tokens": 512}
    assert store.fetchall("SELECT kind, text FROM blobs WHERE sha256 = ?", [answer["completion_sha256"]]) == [
        ("completion", "new answer")]
    [row] = store.dicts("SELECT * FROM eval_samples")
    assert {k: row[k] for k in ("eval_id", "problem_id", "suite", "level", "sample_index", "turn", "format_ok",
                                "compiled", "correct", "speedup", "error_category", "error_message",
                                "completion_sha256")} == {
        "eval_id": "e", "problem_id": "L1/19", "suite": "kernelbench", "level": 1, "sample_index": 2, "turn": 0,
        "format_ok": False, "compiled": False, "correct": False, "speedup": None, "error_category": "pending",
        "error_message": "answer recorded, not judged yet", "completion_sha256": answer["completion_sha256"]}


def test_a_failed_request_records_its_verdict_and_no_answer(store) -> None:
    log = log_of(store)
    log.eval_id = "e"
    failed = EvalResult("L1/19", "", "triton", "", "", error_category=ErrorCategory.INFRA, error_message="gone")
    log.record(env(completion="", result=failed, format_ok=True), 0, None)
    assert store.count("model_answers") == 0
    assert store.fetchall("SELECT format_ok, error_category, error_message FROM eval_samples") == [
        (True, "infra", "gone")]


def test_a_log_without_an_evaluation_records_nothing(store) -> None:
    log_of(store).record(env(), 0, ChatAnswer("x", "stop", 1, 1))
    assert store.count("model_answers") == 0 and store.count("eval_samples") == 0


# -- the served model's own decisions --------------------------------------------------------------------------------
def test_answering_before_settling_is_refused() -> None:
    model = ServedModel("openai:m", None, "run", "holdout", 0.7, 1.0)
    model.chat = SimpleNamespace()  # half settled
    with pytest.raises(AssertionError, match=r"^settle\(\) comes first$"):
        model.answer([], lambda *a: [])


@pytest.mark.parametrize("gone, why", [(None, "they failed after their retries"),
                                       ("the model server at x stopped answering (HTTP 503).",
                                        "the model server at x stopped answering (HTTP 503).")])
def test_a_partial_report_is_an_error_that_says_why_and_carries_the_report(gone, why) -> None:
    model = ServedModel("openai:m", None, "run", "holdout", 0.7, 1.0)
    report = SimpleNamespace(eval_id="e7")
    assert model.failure(report) is None  # not settled: nothing was asked
    model.chat = SimpleNamespace(usage=SimpleNamespace(unanswered=0), gone=gone)
    assert model.failure(report) is None
    model.chat.usage.unanswered = 2
    error = model.failure(report)
    assert isinstance(error, UnansweredRequests) and error.report is report and error.exit_code == 3
    assert str(error) == (f"2 request(s) got no answer ({why}); the report above is partial (eval_id e7). Run the "
                          "same command again when the server answers: it sends only those.")
