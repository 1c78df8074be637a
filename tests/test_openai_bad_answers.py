"""An OpenAI-compatible server that answers, but not with what was asked for (a 200 whose body is not JSON, a chat
completion without `choices`, an HTML page for GET /models), is the server's failure, never the model's: `eval-model`
(against tests/chat_server.py in its own process) exits 3 with one sentence and a partial report, and the same
command against a server that answers sends only the requests that got no answer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from kernelbench_rl.errors import ExitCode, InfraError
from kernelbench_rl.policy.openai_backend import OpenAIChatPolicy, OpenAIPolicySpec
from kernelbench_rl.store import Store

try:
    from tests.test_openai_policy import CLI_OVERRIDES, REPO, free_port, start_chat_server
except ImportError:  # pragma: no cover - run from tests/
    from test_openai_policy import CLI_OVERRIDES, REPO, free_port, start_chat_server

ENV = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"PYTHONPATH": str(REPO)}


def _eval_model(url: str, db: Path, max_problems: int = 2) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "eval-model", "--policy", "openai:canned",
                           "--base-url", f"{url}/v1", "--samples", "2", "--split", "train", "--max-problems",
                           str(max_problems), "--db", str(db), "--run-id", "api-eval", "--timeout", "5", "--retries", "1",
                           *CLI_OVERRIDES], cwd=REPO, env=ENV, capture_output=True, text=True, timeout=400)


def _stopped(proc: subprocess.Popen) -> None:
    proc.terminate()
    proc.wait(timeout=30)


@pytest.mark.parametrize("kind", ["text", "nochoices"])
def test_a_malformed_answer_is_retried_then_an_infra_error_not_a_format_failure(tmp_path, monkeypatch, kind):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    proc, url = start_chat_server(tmp_path / "chat.log", PLAIN="1", MALFORMED=kind, MALFORMED_PROBLEMS="all")
    try:
        waits: list[float] = []
        policy = OpenAIChatPolicy(OpenAIPolicySpec.from_policy("openai:canned", f"{url}/v1", max_retries=2,
                                                               backoff_s=0.01, timeout_s=10), sleep=waits.append)
        from kernelbench_rl.problems import get_problem

        prompt = [{"role": "user", "content": get_problem("L1/19").source}]
        with pytest.raises(InfraError) as err:
            policy.complete(prompt, max_tokens=64)
        stats = httpx.get(f"{url}/stats").json()
    finally:
        _stopped(proc)
    message = str(err.value)
    assert "still failed after 2 retries (a malformed answer: " in message and len(message.splitlines()) == 1
    assert ("not JSON" if kind == "text" else "without choices") in message
    assert (policy.usage.retries, policy.usage.unanswered, policy.usage.requests) == (2, 1, 0)
    assert stats["malformed"] == 3 and waits == [0.01, 0.02]


def test_models_answering_html_is_one_sentence_exit_3_and_nothing_sent(tmp_path):
    proc, url = start_chat_server(tmp_path / "chat.log", PLAIN="1", MODELS_HTML="1")
    try:
        done = _eval_model(url, tmp_path / "kb.duckdb")
        stats = httpx.get(f"{url}/stats").json()
    finally:
        _stopped(proc)
    assert done.returncode == ExitCode.BUSY, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert "Traceback" not in done.stderr and "answered GET /models with a body that is not JSON (text/html" in line
    assert "nothing was sent" in line and "--base-url" in line
    assert stats.get("requests", 0) == 0


def test_a_body_that_is_not_json_is_the_servers_failure_exit_3(tmp_path):
    proc, url = start_chat_server(tmp_path / "chat.log", only_prose=True, PLAIN="1", MALFORMED="text",
                                  MALFORMED_PROBLEMS="all")
    try:
        done = _eval_model(url, tmp_path / "kb.duckdb", max_problems=1)
    finally:
        _stopped(proc)
    assert done.returncode == ExitCode.BUSY, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("error: 2 request(s) got no answer") and "the report above is partial" in last
    rows = Store(tmp_path / "kb.duckdb").fetchall("SELECT error_category, error_message FROM eval_samples")
    assert len(rows) == 2 and {r[0] for r in rows} == {"infra"} and all("malformed answer" in r[1] for r in rows)


def test_answers_without_choices_give_a_partial_report_and_the_rerun_sends_only_those(tmp_path):
    """L1/1's requests get 200s without `choices`; L1/2's are answered. First run: L1/1 has no verdict (not a 0.000
    pass@1), the report is partial, exit 3. The same command on a server that answers sends only L1/1's two."""
    db, port = tmp_path / "kb.duckdb", free_port()
    proc, url = start_chat_server(tmp_path / "chat.log", only_prose=True, port=port, PLAIN="1", MALFORMED="nochoices",
                                  MALFORMED_PROBLEMS="L1/1")
    try:
        first = _eval_model(url, db)
    finally:
        _stopped(proc)
    assert first.returncode == ExitCode.BUSY, first.stdout[-2000:] + first.stderr[-2000:]
    assert "Traceback" not in first.stderr and "the report above is partial" in first.stderr
    assert "| unjudged_samples | 2 |" in first.stdout
    metrics = json.loads(Store(db).fetchall("SELECT metrics_json FROM eval_reports WHERE level IS NULL")[0][0])
    assert metrics["num_problems"] == 1 and metrics["problems_without_verdict"] == 1  # L1/1 not scored as wrong
    assert Store(db).fetchall("SELECT count(*) FROM model_answers") == [(2,)]

    proc, url = start_chat_server(tmp_path / "chat.log", only_prose=True, port=port, PLAIN="1")
    try:
        second = _eval_model(url, db)
        stats = httpx.get(f"{url}/stats").json()
    finally:
        _stopped(proc)
    assert second.returncode == 0, second.stderr[-3000:]
    assert stats["requests"] == 2 and set(stats["served"]) == {"L1/1"}  # only what got no answer
    assert "2 answer(s) reused" in second.stdout and "| unjudged_samples | 0 |" in second.stdout
