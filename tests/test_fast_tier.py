"""The fast tier (`make test-fast`, docs/testing.md): what marks a test heavy, and the guard that fails a test of the
fast tier which starts an interpreter, an evaluator pool or a server all the same."""

from __future__ import annotations

import ast
import multiprocessing
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import HEAVY, HEAVY_FIXTURES, HEAVY_GROUPS, TESTS_DIR, heavy_kind, heavy_reason

from tests.fast_tier import HeavyStart, _Guard, guarded, heavy_command

pytest_plugins = ("pytester",)


# -- the guard ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("command", [
    [sys.executable, "-m", "kernelbench_rl.evaluation.worker.boot"],  # an evaluator worker
    [sys.executable, "-m", "uvicorn", "app:app"],  # a Prefect API server, an environment server
    ["/usr/bin/python3", "-c", "pass"],
    ["kernelbench-rl", "train"],
    [str(Path(sys.executable).parent / "kernelbench-rl"), "eval", "--json"],
    "kernelbench-rl problems list | head",  # through a shell
    ["prefect", "server", "start"],
    ["dask-worker", "tcp://127.0.0.1:8786"],
])
def test_the_guard_refuses_interpreters_pools_and_servers_before_they_start(command):
    assert heavy_command(command) is not None
    with guarded(_Guard(None)), pytest.raises(HeavyStart, match="the fast tier starts no"):
        subprocess.Popen(command, shell=isinstance(command, str))


def test_the_guard_lets_other_programs_and_plain_forks_run():
    with guarded(_Guard(None)):
        assert subprocess.run(["true"], check=False).returncode == 0
        assert subprocess.run("echo python-free | cat", shell=True, capture_output=True, text=True).stdout == \
            "python-free\n"
        # a fork copies this interpreter: no new one starts
        process = multiprocessing.get_context("fork").Process(target=_exit_at_once)
        process.start()
        process.join(10)
        assert process.exitcode == 0


@pytest.mark.parametrize("method", ["spawn", "forkserver"])
def test_the_guard_refuses_a_process_that_starts_an_interpreter(method):
    with guarded(_Guard(None)), pytest.raises(HeavyStart, match=method):
        multiprocessing.get_context(method).Process(target=_exit_at_once).start()


def _exit_at_once() -> None:
    import os

    os._exit(0)


def test_a_fast_tier_test_that_swallows_the_refusal_still_fails(pytester: pytest.Pytester):
    pytester.makepyfile(test_sly="""
        import subprocess, sys

        def test_starts_a_worker_and_hides_it():
            try:
                subprocess.Popen([sys.executable, "-c", "pass"])
            except Exception:
                pass  # the code under test might catch it: a failed start, retried later

        def test_starts_nothing():
            assert subprocess.run(["true"]).returncode == 0
    """)
    result = pytester.runpytest_inprocess("-p", "tests.fast_tier", "-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*this test started:*", "*a subprocess: *python* -c pass*"])


# -- what is heavy ------------------------------------------------------------------------------------------
def test_a_test_is_heavy_by_its_fixtures_its_marks_or_its_entry():
    assert heavy_reason("test_x.py", ["test_a"], ["tmp_path", "shared_cpu_pool"], set()) == "uses shared_cpu_pool"
    assert heavy_reason("test_x.py", ["test_a"], [], {"alone", "parametrize"}) == "marked alone"
    assert heavy_reason("test_x.py", ["test_a"], [], {"gpu"}) == "marked gpu"
    assert heavy_reason("test_evaluator.py", ["test_a"], [], set()) == "test_evaluator.py is in HEAVY"
    named = "test_config.py::test_pipeline_checks_its_inputs_before_any_stage"
    assert heavy_reason("test_config.py", ["test_pipeline_checks_its_inputs_before_any_stage"], [], set()) == \
        f"{named} is in HEAVY"
    assert heavy_reason("test_timing_fidelity.py", ["TestStopped", "test_b"], [], set()) == \
        "test_timing_fidelity.py::TestStopped is in HEAVY"
    assert heavy_reason("test_config.py", ["test_packaged_configs_load"], ["tmp_path"], {"parametrize"}) is None
    assert heavy_reason("hacks/test_hacks.py", ["test_hack_earns_nothing_and_leaves_evaluator_healthy"], [], set())


def test_each_reason_has_one_kind_the_profile_reports_its_cpu_under():
    assert heavy_kind(None) == "fast tier: starts nothing"
    assert heavy_kind("marked alone") == "marked alone"
    assert heavy_kind(heavy_reason("test_evaluator.py", ["test_a"], [], set())) == "evaluator pools and sandbox children"
    assert heavy_kind(heavy_reason("test_serve.py", ["test_a"], [], set())) == \
        "servers and processes killed or signalled on purpose"
    assert heavy_kind(heavy_reason("test_training.py", ["test_a"], ["tiny_policy"], set())) == "long in this process"
    # by its first fixture in name order, where a test uses several
    assert heavy_kind(heavy_reason("test_x.py", ["test_a"], ["shared_cpu_pool", "prefect_api"], set())) == \
        "servers and processes killed or signalled on purpose"
    for kind, entries in HEAVY_GROUPS.items():  # every entry of every group, whole files and single tests
        for entry in entries:
            file, _, name = entry.partition("::")
            assert heavy_kind(heavy_reason(file, [name or "test_any"], [], set())) == kind
    assert set(HEAVY_FIXTURES.values()) <= set(HEAVY_GROUPS)


def test_every_heavy_entry_names_a_file_and_a_test_or_class_in_it():
    """A stale entry would let a renamed heavy test back into the fast tier unnoticed by this list."""
    stale = []
    for entry in HEAVY:
        file, _, name = entry.partition("::")
        path = TESTS_DIR / file
        if not path.is_file():
            stale.append(entry)
            continue
        if name:
            tree = ast.parse(path.read_text())
            defined = {node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))}
            if name not in defined:
                stale.append(entry)
    assert not stale, stale
    assert len(set(HEAVY)) == len(HEAVY)


def test_no_test_of_this_run_uses_a_heavy_fixture_without_the_mark(request):
    """In `make test` every test is here and the heavy ones carry the mark; in `make test-fast` none of them is."""
    unmarked = [item.nodeid for item in request.session.items
                if set(HEAVY_FIXTURES).intersection(getattr(item, "fixturenames", ()))
                and item.get_closest_marker("heavy") is None]
    assert not unmarked, unmarked[:10]
    assert request.node.get_closest_marker("heavy") is None
