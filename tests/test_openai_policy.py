"""An OpenAI-compatible model as a policy: our backend (the real `openai` client) against a local
chat-completions server in its own process (tests/chat_server.py: canned kernels, a 429, a reply
slower than the timeout), with real CPU evaluations; then `kernelbench-rl eval-model` and the
Prefect `nightly-eval` flow on the same server, and the missing-key error."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import httpx
import pytest

from kernelbench_rl.envs.kernel_env import EnvSpec, make_group_builders
from kernelbench_rl.errors import ExitCode
from kernelbench_rl.evaluation.result import EvalSettings
from kernelbench_rl.policy.openai_backend import OpenAIChatPolicy, OpenAIPolicySpec, run_chat_episodes
from kernelbench_rl.problems import get_problem
from kernelbench_rl.store import Store
from prefect_session import shared_prefect_api

REPO = Path(__file__).resolve().parents[1]
SETTINGS = EvalSettings(device="cpu", size="small", correctness_trials=1, timeout_s=60)
CLI_OVERRIDES = ["problems.levels=[1]", "eval.device=cpu", "eval.correctness_trials=1", "sampling.max_tokens=256"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_chat_server(log: Path, only_prose: bool = False, failing: str = "", port: int | None = None,
                      **settings: str) -> tuple[subprocess.Popen, str]:
    """The stub in its own process; `settings` are its CHAT_SERVER_* variables (CONTEXT="40960": max_model_len)."""
    port = port or free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO), "CHAT_SERVER_SLOW_S": "3", "CHAT_SERVER_ONLY_PROSE": "1" if only_prose else "0",
           "CHAT_SERVER_FAIL_PROBLEMS": failing, **{f"CHAT_SERVER_{k}": v for k, v in settings.items()}}
    proc = subprocess.Popen([sys.executable, "-m", "uvicorn", "--app-dir", str(REPO / "tests"), "chat_server:app",
                             "--port", str(port), "--log-level", "warning"],
                            cwd=REPO, env=env, stdout=log.open("a"), stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, log.read_text()
        try:
            httpx.get(f"{url}/stats", timeout=1)
            return proc, url
        except httpx.HTTPError:
            time.sleep(0.2)
    proc.kill()
    raise AssertionError(f"the chat server did not start:\n{log.read_text()}")


@pytest.fixture()
def chat_server(tmp_path):
    proc, url = start_chat_server(tmp_path / "chat.log")
    yield url
    proc.terminate()
    proc.wait(timeout=30)


@pytest.fixture()
def prose_chat_server(tmp_path):
    proc, url = start_chat_server(tmp_path / "chat.log", only_prose=True)
    yield url
    proc.terminate()
    proc.wait(timeout=30)


def test_canned_kernels_get_the_direct_evaluators_verdicts(chat_server, tmp_path, monkeypatch, shared_evaluator):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)  # a local server needs no key
    spec = OpenAIPolicySpec.from_policy("openai:canned", f"{chat_server}/v1", concurrency=2, timeout_s=1.5,
                                        max_retries=3, backoff_s=0.05)
    policy = OpenAIChatPolicy(spec)
    problems = [get_problem("L1/19")]
    builders = make_group_builders(problems, 3, EnvSpec(turns=1, max_tokens=256))
    with shared_evaluator(SETTINGS, store=Store(tmp_path / "kb.duckdb")) as evaluator:
        groups = run_chat_episodes(builders, policy, evaluator.evaluate_responses)
    turns = [env.turns[0] for group in groups for env in group]
    problem_ids = [env.problem.id for group in groups for env in group]
    assert len(turns) == 3
    # A reply with no kernel is a format failure, not an error; each problem got one of each answer.
    for group in groups:
        assert Counter(env.turns[0].result.error_category.value for env in group) == Counter(
            {"ok": 1, "format": 1, "mismatch": 1})
    # The same completions straight through a fresh evaluator (no cache): the same verdicts.
    with shared_evaluator(SETTINGS) as direct:
        again = direct.evaluate_responses(problem_ids, [t.completion for t in turns])
    for turn, verdict in zip(turns, again):
        assert not verdict.cached
        assert (turn.result.error_category, turn.result.correct, turn.result.compiled, turn.result.format_ok) == (
            verdict.error_category, verdict.correct, verdict.compiled, verdict.format_ok)
    stats = httpx.get(f"{chat_server}/stats").json()
    assert stats["rate_limited"] == 1 and stats["slow"] == 1
    assert stats["max_in_flight"] <= 2  # the concurrency limit
    usage = policy.usage
    assert usage.requests == 3 and usage.retries == 2  # the 429 and the timed-out slow reply were retried
    assert usage.prompt_tokens > 1000 and usage.completion_tokens > 0


def test_eval_model_writes_a_report_that_sql_shows(chat_server, tmp_path):
    db = tmp_path / "kb.duckdb"
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "eval-model", "--policy", "openai:canned",
                           "--base-url", f"{chat_server}/v1", "--samples", "2", "--split", "train", "--max-problems", "1",
                           "--db", str(db), "--run-id", "api-eval", "--timeout", "1.5", *CLI_OVERRIDES],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stderr[-3000:]
    assert "| metric | openai:canned (train) |" in done.stdout and "retries" in done.stdout
    shown = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "sql", "--db", str(db),
                            "SELECT run_id || '|' || checkpoint || '|' || split || '|' || coalesce('L' || CAST(level AS VARCHAR), 'all') AS report, "
                            "samples_per_problem FROM eval_reports ORDER BY report"],
                           cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert "api-eval|openai:canned|train|all" in shown.stdout and "api-eval|openai:canned|train|L1" in shown.stdout
    metrics = json.loads(Store(db).fetchall(
        "SELECT metrics_json FROM eval_reports WHERE run_id = 'api-eval' AND checkpoint = 'openai:canned' "
        "AND split = 'train' AND level IS NULL")[0][0])
    # two samples of L1/1: the bundled solution (correct) and prose without a kernel (a format failure)
    assert metrics["pass_at_k"]["pass@1"] == pytest.approx(1 / 2) and metrics["correct_rate"] == pytest.approx(1 / 2)
    assert metrics["compile_rate"] == pytest.approx(1 / 2)
    assert metrics["usage"]["requests"] == 2 and metrics["usage"]["retries"] == 2


def test_a_missing_key_for_a_remote_server_is_one_sentence(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "eval-model", "--policy", "openai:gpt-x",
                           "--base-url", "https://models.example.com/v1", "--db", str(tmp_path / "kb.duckdb")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 2
    assert done.stderr.strip().splitlines() == [
        "error: Set OPENAI_API_KEY to the API key for https://models.example.com/v1 (only a local --base-url may run without one)."]


def test_nightly_eval_flow_runs_an_openai_policy(prose_chat_server, tmp_path, monkeypatch):
    # The served model answers in prose only (format failures): the flow's plumbing, without evaluation cost.
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with shared_prefect_api():
        from flows.evaluate import nightly_eval

        db = tmp_path / "kb.duckdb"
        table = nightly_eval(run_ids=["nightly-api"],
                             overrides=[*CLI_OVERRIDES, "problems.holdout_fraction=0.05"],
                             db_path=str(db), samples_per_problem=2,
                             policy="openai:canned", base_url=f"{prose_chat_server}/v1")
    assert "| metric | openai:canned (holdout) |" in table
    rows = Store(db).fetchall("SELECT run_id, checkpoint, split, level FROM eval_reports ORDER BY level NULLS LAST")
    assert rows == [("nightly-api", "openai:canned", "holdout", 1), ("nightly-api", "openai:canned", "holdout", None)]
    metrics = json.loads(Store(db).fetchall(
        "SELECT metrics_json FROM eval_reports WHERE run_id = 'nightly-api' AND level IS NULL")[0][0])
    assert (metrics["num_problems"], metrics["correct_rate"], metrics["usage"]["requests"]) == (2, 0.0, 4)


def test_an_unreachable_server_is_an_infra_error_after_the_retries(monkeypatch):
    from kernelbench_rl.errors import InfraError

    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    waits: list[float] = []
    spec = OpenAIPolicySpec.from_policy("openai:canned", f"http://127.0.0.1:{free_port()}/v1", max_retries=2,
                                        backoff_s=0.01, timeout_s=5)
    policy = OpenAIChatPolicy(spec, sleep=waits.append)
    with pytest.raises(InfraError, match="still failed after 2 retries"):
        policy.complete([{"role": "user", "content": "hi"}], max_tokens=8)
    assert waits == [0.01, 0.02] and policy.usage.retries == 2 and policy.usage.requests == 0


def _eval_model_against_failing_server(tmp_path: Path, failing: str, max_problems: int) -> subprocess.CompletedProcess:
    """`eval-model` on the chat server with `failing` problems' requests always refused (503)."""
    proc, url = start_chat_server(tmp_path / "chat.log", failing=failing)
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"PYTHONPATH": str(REPO)}
    try:
        return subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "eval-model", "--policy", "openai:canned",
                               "--base-url", f"{url}/v1", "--samples", "2", "--split", "train",
                               "--db", str(tmp_path / "kb.duckdb"), "--run-id", "api-eval", "--timeout", "1.5",
                               "--retries", "2", "--max-problems", str(max_problems), *CLI_OVERRIDES],
                              cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def test_a_request_that_keeps_failing_is_that_samples_infra_verdict_and_the_rest_is_judged(tmp_path):
    """One problem's requests always fail: its samples get no verdict (left out of every rate, counted), the other
    problem's are judged, every sample's row is in DuckDB, and the report is partial: exit code 3 (run again)."""
    done = _eval_model_against_failing_server(tmp_path, "L1/1", 2)
    db = tmp_path / "kb.duckdb"
    assert done.returncode == ExitCode.BUSY, done.stderr[-3000:]
    assert "2 request(s) got no answer (they failed after their retries); the report above is partial" in done.stderr
    assert "Traceback" not in done.stderr
    assert "| unjudged_samples | 2 |" in done.stdout
    metrics = json.loads(Store(db).fetchall("SELECT metrics_json FROM eval_reports WHERE level IS NULL")[0][0])
    assert metrics["unjudged_samples"] == 2 and metrics["problems_without_verdict"] == 1
    assert metrics["num_problems"] == 1  # L1/1 is left out, not scored as wrong
    rows = Store(db).fetchall("SELECT problem_id, error_category, error_message FROM eval_samples ORDER BY problem_id, sample_index")
    assert len(rows) == 4 and [r[1] for r in rows[:2]] == ["infra", "infra"]
    assert "still failed after 2 retries" in rows[0][2] and "pending" not in {r[1] for r in rows}


def test_a_server_that_answers_nothing_fails_in_one_sentence_and_keeps_its_rows(tmp_path):
    """Every request refused (503) after its retries: nothing to judge, and the cause is the server's, so the exit
    code is 3 (run again: the rerun sends those requests), not 4 (no verdict on kernels it got)."""
    done = _eval_model_against_failing_server(tmp_path, "all", 1)
    db = tmp_path / "kb.duckdb"
    assert done.returncode == ExitCode.BUSY, done.stdout[-2000:] + done.stderr[-2000:]
    assert done.stderr.strip().splitlines()[-1].startswith(
        "error: 2 request(s) got no answer (they failed after their retries); the report above is partial")
    assert "Traceback" not in done.stderr
    assert Store(db).fetchall("SELECT count(*), min(error_category) FROM eval_samples") == [(2, "infra")]


def test_answers_are_recorded_as_they_arrive(tmp_path):
    """Each answer's text and a pending row reach DuckDB before its evaluation, so a run killed mid-way keeps them."""
    from kernelbench_rl.policy.openai_backend import ChatAnswer
    from kernelbench_rl.training.model_answers import AnswerLog

    problem = get_problem("L1/19")
    (group,) = make_group_builders([problem], 1, EnvSpec(), None, 0)
    (env,) = group()
    env.add_completion("prompt", [1], "some answer", [2], [], "stop")
    store = Store(tmp_path / "kb.duckdb")
    log = AnswerLog(store, "r", "openai:m", "holdout", "m", temperature=1.0, top_p=1.0)
    log.eval_id = "e1"
    log.record(env, 0, ChatAnswer("some answer", "stop", 1, 2, 16))
    assert store.fetchall("SELECT error_category, sample_index FROM eval_samples") == [("pending", 0)]
    assert store.fetchall("SELECT count(*) FROM blobs WHERE text = 'some answer'") == [(1,)]
    assert store.fetchall("SELECT eval_id, finish_reason, completion_tokens FROM model_answers") == [("e1", "stop", 2)]


@pytest.mark.parametrize("command", [["eval-model", "--policy", "openai:m", "--base-url", "http://127.0.0.1:9/v1"],
                                     ["env", "serve", "--port", "18999"], ["train"]])
def test_a_cuda_evaluator_without_a_gpu_is_refused_at_start(command, tmp_path):
    import torch

    if torch.cuda.is_available():
        pytest.skip("this machine has a GPU")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"PYTHONPATH": str(REPO)}
    done = subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", *command, "eval.device=cuda",
                           f"db_path={tmp_path / 'kb.duckdb'}"], cwd=REPO, env=env, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2, (done.stdout[-1000:], done.stderr[-1000:])
    assert "eval.device=cuda needs a CUDA GPU, and none is visible; use eval.device=cpu." in done.stderr
    assert not (tmp_path / "kb.duckdb").exists()  # nothing started, nothing written


def _eval_model(url: str, db: Path, *extra: str, overrides: tuple[str, ...] = tuple(CLI_OVERRIDES),
                samples: int = 2, max_problems: int = 1, timeout: int = 400) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"PYTHONPATH": str(REPO)}
    return subprocess.run([sys.executable, "-m", "kernelbench_rl.cli", "eval-model", "--policy", "openai:canned",
                           "--base-url", f"{url}/v1", "--samples", str(samples), "--split", "train",
                           "--max-problems", str(max_problems), "--db", str(db), "--run-id", "api-eval",
                           "--timeout", "5", "--retries", "1", *extra, *overrides],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout)


NO_CAP = tuple(o for o in CLI_OVERRIDES if not o.startswith("sampling.max_tokens"))  # the served model's budget


def test_the_answer_budget_is_the_served_models_context_kevin_turns_included(tmp_path):
    """The server says its model has 40960 tokens of context: every request (each Kevin turn with its own, longer
    prompt) asks for what that leaves after its prompt, not the 3072 of the config's local base model; the report
    counts the answers cut at their budget."""
    proc, url = start_chat_server(tmp_path / "chat.log", only_prose=True, PLAIN="1", CONTEXT="40960", LENGTH="1")
    try:
        done = _eval_model(url, tmp_path / "kb.duckdb", "--config", "kevin", overrides=(*NO_CAP, "env.turns=2"))
        budgets = httpx.get(f"{url}/stats").json()["budgets"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert done.returncode == 0, done.stderr[-3000:]
    assert len(budgets) == 4  # two samples, two turns each
    turn_0, turn_1 = sorted(set(budgets), reverse=True)  # a turn's budget is what its own prompt leaves
    assert 40960 - 16000 < turn_1 < turn_0 < 40960 and budgets.count(turn_0) == budgets.count(turn_1) == 2
    assert "context 40960 tokens (the server's /models)" in done.stdout
    assert "4 of 4 answers hit the token budget (finish_reason length)" in done.stdout
    metrics = json.loads(Store(tmp_path / "kb.duckdb").fetchall(
        "SELECT metrics_json FROM eval_reports WHERE level IS NULL")[0][0])
    assert (metrics["usage"]["truncated"], metrics["usage"]["context_tokens"]) == (4, 40960)


def test_a_flag_sets_the_context_and_without_one_the_server_decides(tmp_path):
    """No GET /models on this server: without --context-tokens the requests carry no max_tokens (the server
    decides); with it, the flag's context bounds each answer, and sampling.max_tokens caps it."""
    proc, url = start_chat_server(tmp_path / "chat.log", only_prose=True, PLAIN="1", NO_MODELS="1")
    try:
        plain = _eval_model(url, tmp_path / "a.duckdb", overrides=NO_CAP)
        after_plain = len(httpx.get(f"{url}/stats").json()["budgets"])
        flagged = _eval_model(url, tmp_path / "b.duckdb", "--context-tokens", "20000", overrides=NO_CAP)
        capped = _eval_model(url, tmp_path / "c.duckdb", "--context-tokens", "20000", overrides=tuple(CLI_OVERRIDES))
        budgets = httpx.get(f"{url}/stats").json()["budgets"]
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    for done in (plain, flagged, capped):
        assert done.returncode == 0, done.stderr[-3000:]
    assert budgets[:after_plain] == [None, None]
    assert "no max_tokens sent: the server decides" in plain.stdout
    assert all(4096 < b < 20000 for b in budgets[2:4]) and budgets[4:] == [256, 256]


def test_an_unreachable_server_is_found_before_any_request_and_exits_as_docs_say(tmp_path):
    done = _eval_model(f"http://127.0.0.1:{free_port()}", tmp_path / "kb.duckdb")
    assert done.returncode == ExitCode.BUSY, done.stdout[-2000:] + done.stderr[-2000:]
    (line,) = done.stderr.strip().splitlines()
    assert line.startswith("error: The model server at http://127.0.0.1:") and "does not answer" in line
    assert "nothing was sent. Start it, or check --base-url." in line
    assert "still failed after" not in line  # the check before the first request, not a request's retries


def test_a_server_killed_mid_run_gives_a_partial_report_and_the_rerun_sends_only_what_is_left(tmp_path):
    """The stub dies (SIGKILL) after a few answers: eval-model reports what it has, says it is partial and exits 3;
    the same command on a restarted stub sends only the requests that got no answer, and the report is whole."""
    db, port = tmp_path / "kb.duckdb", free_port()
    total = 8  # four problems, two samples each
    proc, url = start_chat_server(tmp_path / "chat.log", only_prose=True, port=port, PLAIN="1", WORK_S="1.0")
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"} | {"PYTHONPATH": str(REPO)}
    command = [sys.executable, "-m", "kernelbench_rl.cli", "eval-model", "--policy", "openai:canned",
               "--base-url", f"{url}/v1", "--samples", "2", "--split", "train", "--max-problems", "4", "--db", str(db),
               "--run-id", "api-eval", "--timeout", "5", "--retries", "1", "--concurrency", "1", *CLI_OVERRIDES]
    first = subprocess.Popen(command, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 300
        while sum(httpx.get(f"{url}/stats").json()["served"].values()) < 3 and time.monotonic() < deadline:
            assert first.poll() is None, first.communicate()
            time.sleep(0.05)
        proc.kill()
        proc.wait(timeout=30)
        out, err = first.communicate(timeout=300)
    finally:
        if first.poll() is None:
            first.kill()
    assert first.returncode == ExitCode.BUSY, out[-2000:] + err[-2000:]
    assert "the report above is partial" in err and "stopped answering" in err and "Traceback" not in err
    assert "| metric | openai:canned (train) |" in out and "| unjudged_samples |" in out
    answered = Store(db).fetchall("SELECT count(*) FROM model_answers")[0][0]
    assert 3 <= answered < total

    proc, url = start_chat_server(tmp_path / "chat.log", only_prose=True, port=port, PLAIN="1")
    try:
        second = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=400)
        stats = httpx.get(f"{url}/stats").json()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert second.returncode == 0, second.stderr[-3000:]
    assert stats["requests"] == total - answered  # only the unanswered ones were sent again
    assert f"resuming evaluation" in second.stdout and f"{answered} answer(s) reused" in second.stdout
    assert "| unjudged_samples | 0 |" in second.stdout
    rows = Store(db).fetchall("SELECT DISTINCT eval_id FROM eval_reports")
    assert len(rows) == 1  # the resumed report replaced the partial one
    assert Store(db).fetchall("SELECT count(*) FROM eval_samples WHERE error_category IN ('infra', 'pending')") == [(0,)]


def test_a_level_with_nothing_judged_shows_dashes_not_zeros():
    """L1 judged (one right of two), L2's samples all without a verdict: L2's rates are "-", not 0.000."""
    from kernelbench_rl.metrics import SampleOutcome, summarize
    from kernelbench_rl.training.checkpoint_eval import CheckpointReport, markdown_table

    judged = [SampleOutcome("L1/19", True, True, None), SampleOutcome("L1/19", True, False, None)]
    unanswered = [SampleOutcome("L2/1", False, False, None, judged=False)] * 2
    report = CheckpointReport("r", "openai:m", "holdout", judged + unanswered, summarize(judged + unanswered, [1]),
                              {1: summarize(judged, [1]), 2: summarize(unanswered, [1])})
    rows = {line.split("|")[1].strip(): line.split("|")[2].strip() for line in markdown_table([report]).splitlines()[2:]}
    assert (rows["correct_rate"], rows["L1 correct_rate"], rows["L1 pass@1"]) == ("0.500", "0.500", "0.500")
    assert rows["L2 num_problems"] == "0"
    assert {rows[f"L2 {key}"] for key in ("compile_rate", "correct_rate", "pass@1", "fast_1")} == {"-"}
