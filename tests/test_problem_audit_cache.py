"""The problem audit of a set is stored in this user's private cache: a later process reads it back instead of
auditing again, and anything the audit follows from (a problem's text, the precision) makes it audit afresh."""

from __future__ import annotations

import dataclasses
import json

import pytest

from kernelbench_rl import private_cache
from kernelbench_rl.problems import audit, get_problem


@pytest.fixture()
def counted(tmp_path, monkeypatch):
    """audit_set with its cache in a fresh folder and every real audit counted; each call starts as a new process
    would (nothing remembered in memory)."""
    monkeypatch.setenv(private_cache.CACHE_DIR_ENV, str(tmp_path / "cache"))
    real = audit.audit_problems
    calls: list[list[str]] = []

    def audit_problems(problems, **kwargs):
        calls.append([p.id for p in problems])
        return real(problems, **kwargs)

    monkeypatch.setattr(audit, "audit_problems", audit_problems)

    def run(problems, precision="fp32"):
        audit._audit_cached.cache_clear()
        return audit.audit_set(problems, precision)

    yield run, calls
    audit._audit_cached.cache_clear()


def _as_dicts(audits):
    return {key: value.as_dict() for key, value in audits.items()}


def test_a_second_process_reads_the_audit_back(counted) -> None:
    run, calls = counted
    problems = [get_problem("L1/19"), get_problem("L1/20")]  # ReLU and LeakyReLU: siblings, so widened inputs
    first = run(problems)
    again = run(problems)
    assert calls == [["L1/19", "L1/20"]]  # audited once
    assert _as_dicts(again) == _as_dicts(first)
    assert any(a.variant or a.siblings for a in again.values())  # what the evaluator is handed came back too


def test_a_changed_problem_or_precision_is_audited_again(counted) -> None:
    run, calls = counted
    relu, leaky = get_problem("L1/19"), get_problem("L1/20")
    run([relu, leaky])
    changed = dataclasses.replace(leaky, source=leaky.source.replace("negative_slope", "slope"))
    run([relu, changed])
    run([relu, leaky], precision="bf16")
    assert len(calls) == 3


def test_an_entry_of_another_shape_is_audited_again_and_replaced(counted, tmp_path) -> None:
    run, calls = counted
    problems = [get_problem("L1/19")]
    run(problems)
    [entry] = (tmp_path / "cache").glob("problem-audit-*.json")
    stored = json.loads(entry.read_text())
    stored["value"]["audits"] = [{"problem_id": "L1/19", "verdict": "ok"}]  # not an audit's fields
    entry.write_text(json.dumps(stored))
    audits = run(problems)
    assert len(calls) == 2 and audits["L1/19"].name == problems[0].name
    assert run(problems)["L1/19"].status == audits["L1/19"].status and len(calls) == 2  # the good one replaced it
