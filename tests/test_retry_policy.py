"""Retries only for infrastructure: the policy function, and real Prefect tasks that use it.

Prefect is imported inside the tests: once imported, Prefect reads its settings from the process
environment no more, and test_deployment points its client at its own server through the environment.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from kernelbench_rl.errors import InfraError, StoreBusyError, UserError
from prefect_session import shared_prefect_api
from tasks._retry import INFRA_RETRIES, retry_on_infra


@pytest.fixture(scope="session")
def prefect_api() -> Iterator[str]:
    with shared_prefect_api() as url:
        yield url


@pytest.mark.parametrize("exc", [InfraError("worker lost"), StoreBusyError("The database stayed busy."),
                                 ConnectionError("service unreachable"), TimeoutError("no answer")])
def test_infra_failures_are_retried(exc: BaseException) -> None:
    from prefect.states import Failed

    assert retry_on_infra(None, None, Failed(data=exc)) is True


@pytest.mark.parametrize("exc", [UserError("Unknown problem id 'L9/1'."), ValueError("bad value"),
                                 RuntimeError("a bug"), KeyError("missing")])
def test_user_errors_and_bugs_are_not_retried(exc: BaseException) -> None:
    from prefect.states import Failed

    assert retry_on_infra(None, None, Failed(data=exc)) is False


def _attempts(path: Path) -> int:
    return len(path.read_text()) if path.exists() else 0


def _counting_task(fail_with: type[BaseException], failures: int):
    """A task that records each attempt in a file and raises `fail_with` for its first `failures` attempts."""
    from prefect import task

    @task(retries=2, retry_delay_seconds=0, retry_condition_fn=retry_on_infra)
    def flaky(counter: str) -> str:
        path = Path(counter)
        with path.open("a") as fh:
            fh.write("x")
        if _attempts(path) <= failures:
            raise fail_with(f"attempt {_attempts(path)} fails")
        return "done"

    return flaky


def _run_in_a_flow(flaky, counter: Path) -> str:
    from prefect import flow

    @flow
    def run_it() -> str:
        return flaky(str(counter))

    return run_it()


def test_infra_error_is_retried_until_it_succeeds(prefect_api: str, tmp_path: Path) -> None:
    counter = tmp_path / "attempts"
    flaky = _counting_task(InfraError, failures=2)

    assert _run_in_a_flow(flaky, counter) == "done"
    assert _attempts(counter) == 3


def test_infra_error_beyond_the_retries_fails(prefect_api: str, tmp_path: Path) -> None:
    counter = tmp_path / "attempts"
    flaky = _counting_task(InfraError, failures=5)

    with pytest.raises(InfraError):
        _run_in_a_flow(flaky, counter)
    assert _attempts(counter) == 3


@pytest.mark.parametrize("error", [ValueError, UserError])
def test_a_bug_or_user_error_runs_once(prefect_api: str, tmp_path: Path, error: type[BaseException]) -> None:
    counter = tmp_path / "attempts"
    flaky = _counting_task(error, failures=1)

    with pytest.raises(error):
        _run_in_a_flow(flaky, counter)
    assert _attempts(counter) == 1


def test_our_tasks_use_the_infra_policy() -> None:
    from tasks.corpus import build_index, ingest_source
    from tasks.evaluation import evaluate
    from tasks.training import train_step

    for t in (evaluate, ingest_source, build_index):
        assert t.retries == INFRA_RETRIES, t.name
        assert t.retry_condition_fn is retry_on_infra, t.name
    # A training step is never retried in-process (it would train twice); resuming the run replays it.
    assert train_step.retries == 0
