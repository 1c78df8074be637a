"""A problem's reference has a time budget of its own: past it the problem gets no verdict, and the batch goes on."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import shutil
import tempfile
import time
from pathlib import Path

import pytest

from kernelbench_rl.evaluation.worker import reference_budget
from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.worker.reference_cache import ReferenceCache
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings
from kernelbench_rl.problems import Problem, get_problem, load_solution

RELU = load_solution(get_problem("L1/19"))
BUDGET_S = 5.0

# A tiny problem whose reference forward takes SLEEP_S; each forward the reference starts is counted in a file.
SLOW_SOURCE = '''import time

import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        try:
            with open(FORWARDS_FILE, "a") as handle:
                handle.write("forward\\n")
        except OSError:
            pass  # timed beside a kernel on the GPU, it runs in the sandboxed child, where such writes are refused
        time.sleep(SLEEP_S)
        return torch.relu(x)


def get_inputs():
    return [torch.rand(4, 8)]


def get_init_inputs():
    return []
'''


def _slow_problem(number: int, forwards_file: str, sleep_s: float) -> Problem:
    source = f"FORWARDS_FILE = {forwards_file!r}\nSLEEP_S = {sleep_s!r}\n" + SLOW_SOURCE
    return Problem(level=1, number=number, name=f"{number}_SlowReference", source=source, origin="inline")


@pytest.fixture
def forwards_dir():
    """Where the references count their forwards: a folder every uid can write, since a worker started as root
    drops to nobody and could not write under pytest's own (0700) tmp_path."""
    path = Path(tempfile.mkdtemp(prefix="kbrl-forwards-"))
    path.chmod(0o777)
    yield path
    shutil.rmtree(path, ignore_errors=True)


def _forwards(path) -> int:
    return len(path.read_text().splitlines()) if path.exists() else 0


@pytest.mark.alone  # a 1 s timeout or a 5 s budget inside: a busy neighbour would move the verdict
def test_a_reference_past_its_budget_gets_no_verdict_and_the_batch_goes_on(forwards_dir):
    forwards, other_forwards = forwards_dir / "forwards.txt", forwards_dir / "other_forwards.txt"
    slow = _slow_problem(9301, str(forwards), 600.0)
    # A second one: the worker is killed twice, and a normal request in flight both times would have spent its
    # one retry (and come back infra) were those kills counted against it.
    other = _slow_problem(9305, str(other_forwards), 600.0)
    settings = EvalSettings(device="cpu", timeout_s=60, reference_timeout_s=BUDGET_S)
    with Evaluator(settings, static_checks=False, parallel_compiles=2, problems={p.id: p for p in (slow, other)}) as ev:
        ev.start()
        first_pid = ev.pool.worker_pids[0]
        results = ev.evaluate([EvalRequest(slow.id, RELU, settings), EvalRequest("L1/19", RELU, settings),
                               EvalRequest(slow.id, RELU + "\n# another candidate\n", settings),
                               EvalRequest(other.id, RELU, settings)])
        later = ev.evaluate([EvalRequest(slow.id, RELU + "\n# a third candidate\n", settings)])[0]
        replaced = ev.pool.worker_pids[0] != first_pid
        restarts = ev.pool.slots[0].restarts

    assert not any(r.error_category == ErrorCategory.INFRA for r in [*results, later]), \
        [r.error_message for r in [*results, later]]
    normal = results[1]
    assert normal.correct and normal.error_category == ErrorCategory.OK, normal.error_message
    for result in (results[0], results[2], results[3], later):
        assert result.error_category == ErrorCategory.TOO_LARGE, result.error_message
        assert result.error_category.is_ours and not result.correct and result.speedup is None
        assert "5 s" in result.error_message and "eval.reference_timeout_s" in result.error_message
        assert "sizing" in result.error_message
    # One sizing forward started, and none since: the slow problem's other requests were answered without running.
    assert _forwards(forwards) == 1 and _forwards(other_forwards) == 1
    # Killed on purpose, long before the pool's watchdog of a hung request (3 x 60 s + slack), and not counted
    # as a failing worker.
    assert replaced and restarts == 0


@pytest.mark.alone  # a 1 s timeout or a 5 s budget inside: a busy neighbour would move the verdict
def test_the_references_forwards_are_not_charged_to_its_candidate(forwards_dir):
    # Each correctness seed's reference forward takes 0.4 s; 5 seeds and 2 widened ones are over 2 s of the
    # reference's, past the candidate's 1 s timeout, while the candidate (a ReLU) takes milliseconds.
    slow = _slow_problem(9306, str(forwards_dir / "forwards.txt"), 0.4)
    settings = EvalSettings(device="cpu", timeout_s=1.0, reference_timeout_s=30.0, correctness_trials=5)
    with Evaluator(settings, static_checks=False, problems={slow.id: slow}) as ev:
        result = ev.evaluate([EvalRequest(slow.id, RELU, settings)])[0]
    assert result.correct and result.error_category == ErrorCategory.OK, result.error_message
    assert result.phase_seconds["correctness_reference"] > settings.timeout_s
    assert _forwards(forwards_dir / "forwards.txt") >= 4  # the reference's forwards really ran in that time


SLOW_CANDIDATE = """import time

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        time.sleep(0.6)
        return torch.relu(x)
"""


@pytest.mark.alone  # a 1 s timeout or a 5 s budget inside: a busy neighbour would move the verdict
def test_a_candidate_as_slow_as_its_reference_is_judged_not_timed_out(forwards_dir):
    # 0.6 s a call on both sides: its first call and each of its 7 correctness calls would pass a 1 s timeout.
    slow = _slow_problem(9307, str(forwards_dir / "forwards.txt"), 0.6)
    settings = EvalSettings(device="cpu", timeout_s=1.0, reference_timeout_s=30.0, correctness_trials=5)
    with Evaluator(settings, static_checks=False, problems={slow.id: slow}) as ev:
        equal, slower = ev.evaluate([EvalRequest(slow.id, SLOW_CANDIDATE, settings),
                                     EvalRequest(slow.id, SLOW_CANDIDATE.replace("sleep(0.6)", "sleep(5.0)"), settings)])
    assert equal.correct and equal.error_category == ErrorCategory.OK, equal.error_message
    # The allowance is twice the reference's call, no more: a candidate 8x slower still times out.
    assert slower.error_category == ErrorCategory.TIMEOUT, slower.error_message


def test_only_the_outermost_reference_phase_is_reported():
    events: list[str | None] = []
    with reference_budget.phase("outputs"):
        pass  # outside an evaluation: nothing to report to
    with reference_budget.reporting(events.append):
        with reference_budget.phase("sizing"):
            with reference_budget.phase("outputs"):
                pass
        with reference_budget.phase("baseline"):
            pass
    assert events == ["sizing", None, "baseline", None]


def test_the_reference_reports_the_forwards_it_computes_and_learns_their_time(tmp_path):
    forwards = tmp_path / "forwards.txt"
    problem = _slow_problem(9302, str(forwards), 0.05)
    cache = ReferenceCache("cpu", str(tmp_path), 1 << 30, None)
    state = cache.problem_state(problem.id, problem.source)
    events: list[str | None] = []
    with reference_budget.reporting(events.append):
        cache.size(state, "fp32", None, 0, 0, 0)
        cache.reference_outputs(state, "fp32", state.seed_pool[0])  # cached by the sizing: no forward, no phase
    assert events == ["outputs", None] and _forwards(forwards) == 1
    assert state.forward_s is not None and state.forward_s >= 0.05  # the forward sleeps 0.05 s

    # 50 calls of 0.05 s or more are past a quarter of a 4 s budget: as many as fit it, and at least 10.
    calls, why = state.timed_calls(EvalSettings(timing_trials=50, reference_timeout_s=4.0))
    assert reference_budget.MIN_TIMED_CALLS <= calls <= 20 and f"{calls} of 50 asked" in why
    assert "4 s budget" in why and "eval.reference_timeout_s" in why
    assert state.timed_calls(EvalSettings(timing_trials=50, timeout_s=120.0)) == (50, "50 as asked")


@pytest.mark.parametrize("asked, per_call_s, budget_s, expected", [
    (50, None, 1.0, 50),  # not measured: as asked
    (50, 0.005, 1.0, 50),  # fast: never cut, whatever the budget
    (50, 0.162, 120.0, 50),  # 8 s of calls fit a quarter of 120 s
    (50, 2.4, 120.0, 12),  # 30 s / 2.4 s
    (50, 50.0, 120.0, 10),  # the floor
    (8, 50.0, 120.0, 8),  # never more than asked
])
def test_timed_calls_fit_a_share_of_the_budget(asked, per_call_s, budget_s, expected):
    assert reference_budget.timed_calls(asked, per_call_s, budget_s)[0] == expected


def test_the_budget_defaults_to_the_timeout_and_keeps_verdict_keys():
    assert EvalSettings(timeout_s=30).reference_budget_s == 30
    assert EvalSettings(timeout_s=30, reference_timeout_s=7).reference_budget_s == 7
    assert reference_budget.budget_of({"settings": {"timeout_s": 30, "reference_timeout_s": None}}) == 30
    # The default leaves every cached verdict's key as it was before the field; a budget set is part of it.
    fields = dataclasses.asdict(EvalSettings())
    del fields["reference_timeout_s"]
    assert EvalSettings().settings_hash() == hashlib.sha256(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]
    assert EvalSettings(reference_timeout_s=7).settings_hash() != EvalSettings().settings_hash()


def test_the_config_key_is_validated_and_the_default_keeps_run_ids():
    from kernelbench_rl.config import load_config
    from kernelbench_rl.errors import UserError

    assert load_config("default", ["eval.reference_timeout_s=30"]).eval.reference_timeout_s == 30
    assert load_config("default", []).eval.reference_timeout_s is None
    assert (load_config("default", ["eval.reference_timeout_s=30"]).resolved_run_id()
            != load_config("default", []).resolved_run_id())
    with pytest.raises(UserError, match="eval.reference_timeout_s should be greater than 0"):
        load_config("default", ["eval.reference_timeout_s=0"])


def _cuda() -> bool:
    import torch

    return torch.cuda.is_available()


@pytest.mark.gpu
@pytest.mark.skipif(not _cuda(), reason="timing needs a GPU")
def test_on_the_gpu_a_slow_reference_is_timed_for_fewer_calls_and_a_too_slow_one_gets_no_verdict(forwards_dir):
    # The reference takes 0.2 s a call (host sleep): 50 calls would be 10 s, past a quarter of a 20 s budget.
    slowish = _slow_problem(9303, str(forwards_dir / "slowish.txt"), 0.2)
    too_slow = _slow_problem(9304, str(forwards_dir / "too_slow.txt"), 600.0)
    settings = EvalSettings(device="cuda", size="small", timeout_s=120, timing_trials=50, reference_timeout_s=20.0)
    with Evaluator(settings, static_checks=False, problems={p.id: p for p in (slowish, too_slow)}) as ev:
        timed, normal, none = ev.evaluate([EvalRequest(slowish.id, RELU, settings), EvalRequest("L1/19", RELU, settings),
                                           EvalRequest(too_slow.id, RELU, settings)])
    assert timed.correct, timed.error_message
    calls = int(timed.versions["timed_calls"].split()[0])
    assert reference_budget.MIN_TIMED_CALLS <= calls <= 25 and "of 50 asked" in timed.versions["timed_calls"]
    assert normal.correct and normal.versions["timed_calls"] == "50 as asked", normal.error_message
    assert none.error_category == ErrorCategory.TOO_LARGE and "20 s" in none.error_message, none.error_message
    assert _forwards(forwards_dir / "too_slow.txt") == 1
