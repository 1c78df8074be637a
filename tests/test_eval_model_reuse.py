"""eval-model reuses an earlier answer only for the very same request. An evaluation whose server stopped answering
is resumed by the same command (only the requests left are sent); a rerun whose temperature, top_p, answer budget
(max_tokens), model or prompt changed asks every request again, with its own settings, and none of the earlier
answers is taken.

In this process: a chat server on a thread of the test (the standard library's HTTP server), the real client
(`OpenAIChatPolicy`), `evaluate_model` with its real answer log in DuckDB, and a judge of plain verdicts instead of
the evaluator."""

from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from kernelbench_rl.compose import build_run_parts
from kernelbench_rl.config import load_config
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
from kernelbench_rl.problems.loaders import BUNDLED_ROOT
from kernelbench_rl.store import Store
from kernelbench_rl.training.checkpoint_eval import evaluate_model
from kernelbench_rl.training.model_answers import ServedModel, UnansweredRequests, request_sha256

PROBLEM_FILES = {"L1/19": "level1/19_ReLU.py", "L1/21": "level1/21_Sigmoid.py"}
SAMPLES = 2
REQUESTS = len(PROBLEM_FILES) * SAMPLES  # one turn each
RUN_ID = "reuse"
MODEL = "stand-in"


class ChatServer:
    """/v1/models and /v1/chat/completions: answers the first `answer_first` requests of a run, then 503s (a
    server that stopped answering); every request's body is kept."""

    def __init__(self) -> None:
        self.bodies: list[dict] = []
        self.answer_first: int | None = None
        self._lock = threading.Lock()
        chat = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *_args) -> None:
                pass

            def _send(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def do_GET(self) -> None:  # noqa: N802
                self._send(200, {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "test"}]})

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                with chat._lock:
                    chat.bodies.append(body)
                    refuse = chat.answer_first is not None and len(chat.bodies) > chat.answer_first
                if refuse:
                    self._send(503, {"error": {"message": "overloaded"}})
                    return
                self._send(200, {"id": "c", "object": "chat.completion", "created": 0, "model": MODEL,
                                 "choices": [{"index": 0, "finish_reason": "stop", "message": {
                                     "role": "assistant", "content": f"answer {len(chat.bodies)}: no kernel"}}],
                                 "usage": {"prompt_tokens": 10, "completion_tokens": 4, "total_tokens": 14}})

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}/v1"
        self.thread = threading.Thread(target=self.httpd.serve_forever, daemon=True)
        self.thread.start()

    def sent(self) -> list[dict]:
        """The bodies received since the last call."""
        with self._lock:
            bodies, self.bodies = self.bodies, []
        return bodies

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def server():
    chat = ChatServer()
    yield chat
    chat.close()


@pytest.fixture
def root(tmp_path: Path) -> Path:
    """Two level-1 problems of the bundled set in a folder of the test's (so a test may change one)."""
    root = tmp_path / "KernelBench"
    for rel in PROBLEM_FILES.values():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(BUNDLED_ROOT / rel, root / rel)
    return root


def judge(problem_ids: list[str], responses: list[str]) -> list[EvalResult]:
    """A format failure for every answer (they hold no kernel): a verdict, and nothing to evaluate."""
    return [EvalResult(pid, "0" * 64, "triton", "fp32", "cpu", error_category=ErrorCategory.FORMAT,
                       error_message="no code block") for pid in problem_ids]


def parts_of(tmp_path: Path, root: Path, *overrides: str):
    cfg = load_config("default", [
        f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}", f"run_id={RUN_ID}",
        f"problems.root={root}", "problems.levels=[1]", "problems.holdout_fraction=0", "problems.audit=false",
        "eval.device=cpu", *overrides])
    return build_run_parts(cfg, policy_beside=True)


def evaluate(tmp_path: Path, root: Path, server: ChatServer, *overrides: str, model: str = MODEL,
             context_tokens: int | None = None):
    return evaluate_model(parts_of(tmp_path, root, *overrides), f"openai:{model}", base_url=server.url,
                          samples_per_problem=SAMPLES, split="all", ks=(1,), evaluate_fn=judge, concurrency=1,
                          max_retries=0, timeout_s=30, context_tokens=context_tokens)


def interrupted(tmp_path: Path, root: Path, server: ChatServer, *overrides: str, answered: int = REQUESTS // 2,
                context_tokens: int | None = None) -> list[dict]:
    """A first run that got answers to its first `answered` requests before the server stopped answering."""
    server.answer_first = answered
    with pytest.raises(UnansweredRequests):
        evaluate(tmp_path, root, server, *overrides, context_tokens=context_tokens)
    first = server.sent()
    assert len(first) == REQUESTS  # every request was asked once, the second half refused
    server.answer_first = None
    return first


def answers(tmp_path: Path) -> list[dict]:
    return Store(tmp_path / "kb.duckdb").dicts(
        "SELECT eval_id, problem_id, sample_index, request_sha256 FROM model_answers ORDER BY eval_id, problem_id, "
        "sample_index")


def test_the_same_command_sends_only_the_requests_left(tmp_path, root, server):
    """The resume this file's other tests rely on to mean something: the same request is not sent again."""
    interrupted(tmp_path, root, server, "sampling.temperature=0.7")
    report = evaluate(tmp_path, root, server, "sampling.temperature=0.7")
    assert len(server.sent()) == REQUESTS - REQUESTS // 2
    assert report.usage["reused"] == REQUESTS // 2
    assert len({row["eval_id"] for row in answers(tmp_path)}) == 1  # resumed: the same evaluation


@pytest.mark.parametrize("setting, before, after", [("temperature", 0.7, 0.2), ("top_p", 1.0, 0.9)])
def test_a_rerun_with_other_sampling_settings_reuses_no_answer(tmp_path, root, server, setting, before, after):
    first = interrupted(tmp_path, root, server, f"sampling.{setting}={before}")
    assert {body[setting] for body in first} == {before}
    report = evaluate(tmp_path, root, server, f"sampling.{setting}={after}")
    again = server.sent()
    assert len(again) == REQUESTS, "an answer to a request of other settings was reused"
    assert {body[setting] for body in again} == {after}
    assert report.usage["reused"] == 0
    # Every answer recorded now is the new request's (the rerun resumed the evaluation: its rows replace the first's)
    recorded = {row["request_sha256"] for row in answers(tmp_path)}
    assert recorded == {digest(body) for body in again}
    assert not recorded & {digest(body) for body in first}


def test_a_rerun_with_another_answer_budget_reuses_no_answer(tmp_path, root, server):
    """An answer cut at 512 tokens is no answer to a request that allows 2048: sampling.max_tokens changed, every
    request is asked again with the new budget."""
    first = interrupted(tmp_path, root, server, "sampling.max_tokens=512")
    assert {body["max_tokens"] for body in first} == {512}
    report = evaluate(tmp_path, root, server, "sampling.max_tokens=2048")
    again = server.sent()
    assert len(again) == REQUESTS, "an answer to a request of another budget was reused"
    assert {body["max_tokens"] for body in again} == {2048}
    assert report.usage["reused"] == 0
    assert {row["request_sha256"] for row in answers(tmp_path)} == {digest(body) for body in again}


def test_a_rerun_whose_context_window_changes_the_budget_reuses_no_answer(tmp_path, root, server):
    """With no cap, a request's budget is what the model's context leaves after its prompt: another context window
    (--context-tokens) is another budget, so another request."""
    first = interrupted(tmp_path, root, server, context_tokens=20_000)
    assert all(body.get("max_tokens") for body in first)
    report = evaluate(tmp_path, root, server, context_tokens=30_000)
    again = server.sent()
    assert len(again) == REQUESTS and report.usage["reused"] == 0
    assert {body["max_tokens"] - 10_000 for body in again} == {body["max_tokens"] for body in first}


def test_the_same_budget_is_the_same_request(tmp_path, root, server):
    interrupted(tmp_path, root, server, "sampling.max_tokens=512")
    report = evaluate(tmp_path, root, server, "sampling.max_tokens=512")
    assert len(server.sent()) == REQUESTS - REQUESTS // 2
    assert report.usage["reused"] == REQUESTS // 2


def test_another_model_reuses_no_answer_of_the_first(tmp_path, root, server):
    """Another model behind the same server is another evaluation: nothing of the first model's is resumed."""
    first = interrupted(tmp_path, root, server)
    report = evaluate(tmp_path, root, server, model="another-model")
    again = server.sent()
    assert len(again) == REQUESTS and report.usage["reused"] == 0
    assert {body["model"] for body in first} == {MODEL} and {body["model"] for body in again} == {"another-model"}
    by_eval = {}
    for row in answers(tmp_path):
        by_eval.setdefault(row["eval_id"], set()).add(row["request_sha256"])
    assert len(by_eval) == 2  # the first model's unfinished evaluation is left as it was


def test_a_finished_evaluation_is_not_resumed_the_same_command_starts_another(tmp_path, root, server):
    evaluate(tmp_path, root, server)
    assert len(server.sent()) == REQUESTS
    report = evaluate(tmp_path, root, server)
    assert len(server.sent()) == REQUESTS and report.usage["reused"] == 0
    assert len({row["eval_id"] for row in answers(tmp_path)}) == 2


def test_settling_probes_the_server_with_the_runs_settings_and_says_what_it_resumes(tmp_path, root, server):
    parts = parts_of(tmp_path, root, "sampling.max_tokens=512", "sampling.temperature=0.3", "sampling.top_p=0.9")
    store = Store(tmp_path / "kb.duckdb")
    lines: list[str] = []
    model = ServedModel.of(parts, f"openai:{MODEL}", server.url, "all", say=lines.append, concurrency=3,
                           max_retries=1, timeout_s=12.0, context_tokens=50_000)
    assert (model.run_id, model.split, model.temperature, model.top_p, model.max_tokens) == (RUN_ID, "all", 0.3, 0.9,
                                                                                              512)
    assert model.settle(store, "fresh") == "fresh"
    spec = model.chat.spec
    assert (spec.model, spec.base_url, spec.concurrency, spec.max_retries, spec.timeout_s, spec.max_tokens,
            spec.context_tokens) == (MODEL, server.url, 3, 1, 12.0, 512, 50_000)
    assert lines == [f"openai:{MODEL} at {server.url}: context 50000 tokens (--context-tokens); each answer gets at "
                     "most 512 tokens (sampling.max_tokens) and what the context leaves after its prompt"]
    interrupted(tmp_path, root, server, "sampling.max_tokens=512", "sampling.temperature=0.3", "sampling.top_p=0.9",
                context_tokens=50_000)
    [earlier] = {row["eval_id"] for row in answers(tmp_path)}
    lines.clear()
    again = ServedModel.of(parts, f"openai:{MODEL}", server.url, "all", say=lines.append, context_tokens=50_000)
    assert again.settle(store, "another") == earlier
    assert lines[1:] == [f"resuming evaluation {earlier}: {REQUESTS // 2} answer(s) already in {store.path}; only "
                         "the requests without one are sent"]


def test_a_rerun_whose_prompt_changed_reuses_no_answer_to_that_prompt(tmp_path, root, server):
    """The reference of one problem changed between the runs (its prompt with it): its answered requests are asked
    again; the other problem's answered request, its prompt unchanged, is reused."""
    first = interrupted(tmp_path, root, server, answered=SAMPLES + 1)
    assert [_problem_of(body) for body in first[:SAMPLES + 1]] == ["L1/19"] * SAMPLES + ["L1/21"], \
        "the test expects L1/19's samples to be asked first"
    relu = root / PROBLEM_FILES["L1/19"]
    relu.write_text(relu.read_text() + "\n# the reference, edited after the first run\n")
    report = evaluate(tmp_path, root, server)
    again = server.sent()
    assert sorted(_problem_of(body) for body in again) == ["L1/19"] * SAMPLES + ["L1/21"] * (SAMPLES - 1)
    assert all("edited after the first run" in json.dumps(body["messages"]) for body in again
               if _problem_of(body) == "L1/19")
    assert report.usage["reused"] == 1


def _problem_of(body: dict) -> str:
    return "L1/21" if "torch.sigmoid(x)" in json.dumps(body["messages"]) else "L1/19"


def digest(body: dict) -> str:
    """The request digest of what the server received."""
    return request_sha256(body["model"], body["messages"], body["temperature"], body["top_p"], body.get("max_tokens"))


def test_a_requests_digest_changes_with_each_part_of_the_request_and_only_with_them():
    messages = [{"role": "system", "content": "write a kernel"}, {"role": "user", "content": "relu"}]
    same = request_sha256("m", messages, 0.7, 1.0)
    assert request_sha256("m", [dict(reversed(list(m.items()))) for m in messages], 0.7, 1.0) == same
    assert request_sha256("m", list(messages), 0.7, 1.0) == same
    changed = [
        request_sha256("other", messages, 0.7, 1.0),
        request_sha256("m", messages[:1] + [{"role": "user", "content": "relu "}], 0.7, 1.0),
        request_sha256("m", list(reversed(messages)), 0.7, 1.0),
        request_sha256("m", messages, 0.70001, 1.0),
        request_sha256("m", messages, 0.7, 0.99),
    ]
    assert same not in changed and len(set(changed)) == len(changed)
