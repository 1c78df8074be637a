"""A served model's answers in DuckDB, one row per request (`model_answers`), so that an evaluation that was
killed, or whose server stopped answering, resumes: the same command sends only the requests left. Each answer
also gets its sample's eval_samples row at once, `pending` until the evaluation's report gives it its verdict.

An evaluation is resumed when it is the newest of its run, model and split and it is unfinished (no report yet,
or a report with requests that never got an answer). An earlier answer is reused only for the very same request:
the same model, prompt messages, sampling settings and answer budget (a changed prompt, temperature or max_tokens is
a new request: an answer cut at 512 tokens is no answer to a request that allows 2048).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kernelbench_rl.envs.kernel_env import EnvGroupBuilder, KernelEnv
from kernelbench_rl.errors import InfraError
from kernelbench_rl.parts import RunParts
from kernelbench_rl.policy.openai_backend import (
    ChatAnswer,
    OpenAIChatPolicy,
    OpenAIPolicySpec,
    ServerInfo,
    run_chat_episodes,
)
from kernelbench_rl.store import Store


class UnansweredRequests(InfraError):
    """Some requests never got an answer (the server stopped answering): the report is partial, its rows are
    recorded, and the same command resumes it."""

    def __init__(self, message: str, report: Any) -> None:
        super().__init__(message)
        self.report = report


def request_sha256(model: str, messages: Sequence[dict[str, str]], temperature: float, top_p: float,
                   max_tokens: int | None = None) -> str:
    """The digest of one request as it is sent: its max_tokens only when it carries one (a request without a budget
    digests as it did before budgets were part of it)."""
    request: dict[str, Any] = {"model": model, "messages": list(messages), "temperature": temperature, "top_p": top_p}
    if max_tokens is not None:
        request["max_tokens"] = max_tokens
    body = json.dumps(request, sort_keys=True, ensure_ascii=False)
    return hashlib.sha256(body.encode()).hexdigest()


class AnswerLog:
    """The answers of one evaluation of a served model: those of an unfinished earlier run, and each new one."""

    def __init__(self, store: Store, run_id: str, label: str, split: str, model: str, *, temperature: float,
                 top_p: float, budget: Callable[[Sequence[dict[str, str]]], int | None] | None = None) -> None:
        self.store, self.run_id, self.label, self.split, self.model = store, run_id, label, split, model
        self.temperature, self.top_p = temperature, top_p
        self.budget = budget  # a request's max_tokens, from its messages (the policy's request_max_tokens)
        self.eval_id: str | None = None
        self._earlier: dict[tuple[str, int, int], tuple[str, ChatAnswer]] = {}
        self._requests: dict[tuple[str, int, int], str] = {}  # each request's sha256, as it is asked

    def resume(self) -> str | None:
        """The eval_id of this evaluation's unfinished earlier run (its answers loaded), else None."""
        latest = self.store.dicts(
            "SELECT eval_id, max(created_at) AS last FROM model_answers WHERE run_id = ? AND checkpoint = ? "
            "AND split = ? GROUP BY eval_id ORDER BY last DESC LIMIT 1", [self.run_id, self.label, self.split])
        if not latest:
            return None
        eval_id = latest[0]["eval_id"]
        report = self.store.dicts("SELECT metrics_json FROM eval_reports WHERE eval_id = ? AND level IS NULL",
                                  [eval_id])
        if report and not json.loads(report[0]["metrics_json"] or "{}").get("usage", {}).get("unanswered"):
            return None  # finished: a rerun is a new evaluation
        rows = self.store.dicts(
            "SELECT a.problem_id, a.sample_index, a.turn, a.request_sha256, b.text, a.finish_reason, a.prompt_tokens, "
            "a.completion_tokens, a.max_tokens FROM model_answers a JOIN blobs b ON b.sha256 = a.completion_sha256 "
            "WHERE a.eval_id = ?", [eval_id])
        self._earlier = {
            (r["problem_id"], r["sample_index"], r["turn"]): (r["request_sha256"], ChatAnswer(
                r["text"], r["finish_reason"] or "", r["prompt_tokens"] or 0, r["completion_tokens"] or 0,
                r["max_tokens"]))
            for r in rows}
        self.eval_id = eval_id
        return eval_id

    @property
    def earlier_answers(self) -> int:
        return len(self._earlier)

    def earlier(self, env: KernelEnv, sample_index: int, messages: list[dict[str, str]]) -> ChatAnswer | None:
        """The answer an earlier run got to this very request, if any (asked before each request is sent)."""
        key = (env.problem.id, sample_index, len(env.turns))
        max_tokens = self.budget(messages) if self.budget is not None else None
        request = self._requests[key] = request_sha256(self.model, messages, self.temperature, self.top_p, max_tokens)
        found = self._earlier.get(key)
        return found[1] if found is not None and found[0] == request else None

    def record(self, env: KernelEnv, sample_index: int, answer: ChatAnswer | None) -> None:
        """This answer of the run, as it arrives, in one turn on the file: its text, its model_answers row (none for
        a request that got no answer) and the sample's eval_samples row, marked `pending` until the report replaces
        it with the verdict (a failed request's: its infra verdict). A run that dies mid-way keeps every answer it
        paid for."""
        if self.eval_id is None:
            return
        turn = env.turns[-1]
        result = turn.result
        with self.store.connect():
            (digest,) = self.store.put_texts("completion", [turn.completion])
            if answer is not None:
                self.store.upsert("model_answers", [{
                    "eval_id": self.eval_id, "run_id": self.run_id, "checkpoint": self.label, "split": self.split,
                    "problem_id": env.problem.id, "sample_index": sample_index, "turn": turn.index,
                    "request_sha256": self._requests.get((env.problem.id, sample_index, turn.index)),
                    "completion_sha256": digest, "finish_reason": answer.finish_reason,
                    "prompt_tokens": answer.prompt_tokens, "completion_tokens": answer.completion_tokens,
                    "max_tokens": answer.max_tokens}])
            self.store.upsert("eval_samples", [{
                "eval_id": self.eval_id, "run_id": self.run_id, "checkpoint": self.label, "split": self.split,
                "problem_id": env.problem.id, "suite": env.problem.suite, "level": env.problem.level,
                "sample_index": sample_index,
                "turn": turn.index, "format_ok": bool(turn.format_ok), "compiled": False, "correct": False,
                "speedup": None, "error_category": result.error_category.value if result is not None else "pending",
                "error_message": result.error_message if result is not None else "answer recorded, not judged yet",
                "eval_key": None, "completion_sha256": digest}])


@dataclass
class ServedModel:
    """A model behind an OpenAI-compatible server answering an evaluation (`checkpoint_eval.evaluate_model`): the
    server probed before anything is paid for, each answer kept as it arrives (`AnswerLog`), and an unfinished
    earlier run of the same run, model and split resumed (only the requests left are sent)."""

    policy: str  # openai:MODEL
    base_url: str | None
    run_id: str
    split: str
    temperature: float
    top_p: float
    max_tokens: int | None = None  # sampling.max_tokens: a cap on each answer
    concurrency: int = 8
    max_retries: int = 4
    timeout_s: float = 300.0
    context_tokens: int | None = None
    say: Callable[[str], None] = field(default=lambda _line: None)
    tensorboard: tuple[Path, int] | None = None  # a served model is no checkpoint of the run: no figures there
    chat: OpenAIChatPolicy | None = None
    server: ServerInfo | None = None
    answers: AnswerLog | None = None

    @classmethod
    def of(cls, parts: RunParts, policy: str, base_url: str | None, split: str, *,
           say: Callable[[str], None] | None = None, **options: Any) -> ServedModel:
        return cls(policy, base_url, parts.run_id, split, parts.sampling.temperature, parts.sampling.top_p,
                   parts.sampling.max_tokens, say=say or (lambda _line: None), **options)

    @property
    def label(self) -> str:
        return self.chat.label if self.chat is not None else self.policy

    @property
    def usage(self) -> dict[str, int] | None:
        if self.chat is None or self.server is None:
            return None
        context = {"context_tokens": self.server.context_tokens} if self.server.context_tokens else {}
        return {**self.chat.usage.to_dict(), **context}

    def settle(self, store: Store, eval_id: str) -> str:
        """The server probed (its answer budget told), then the answers of an unfinished earlier run loaded: its
        eval_id is this evaluation's, else `eval_id`."""
        self.chat = chat = OpenAIChatPolicy(OpenAIPolicySpec.from_policy(
            self.policy, self.base_url, concurrency=self.concurrency, max_retries=self.max_retries,
            timeout_s=self.timeout_s, max_tokens=self.max_tokens, context_tokens=self.context_tokens))
        self.server = chat.probe()  # before the evaluator starts and anything is paid for
        self.say(f"{chat.label} at {chat.where}: {self.server.describe(chat.spec.max_tokens)}")
        self.answers = answers = AnswerLog(store, self.run_id, chat.label, self.split, chat.spec.model,
                                           temperature=self.temperature, top_p=self.top_p,
                                           budget=chat.request_max_tokens)
        resumed = answers.resume()
        if resumed is not None:
            self.say(f"resuming evaluation {resumed}: {answers.earlier_answers} answer(s) already in {store.path}; "
                     "only the requests without one are sent")
        answers.eval_id = resumed or eval_id
        return answers.eval_id

    def answer(self, builders: Sequence[EnvGroupBuilder], judge: Callable[..., Any]) -> list[list[KernelEnv]]:
        assert self.chat is not None and self.answers is not None, "settle() comes first"
        return run_chat_episodes(builders, self.chat, judge, temperature=self.temperature, top_p=self.top_p,
                                 on_answer=self.answers.record, earlier=self.answers.earlier)

    def failure(self, report: Any) -> InfraError | None:
        """UnansweredRequests when some request never got an answer (the report is partial), else None."""
        if self.chat is None or not self.chat.usage.unanswered:
            return None
        why = self.chat.gone or "they failed after their retries"
        return UnansweredRequests(
            f"{self.chat.usage.unanswered} request(s) got no answer ({why}); the report above is partial (eval_id "
            f"{report.eval_id}). Run the same command again when the server answers: it sends only those.", report)
