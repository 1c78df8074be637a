"""Shared test settings: offline, no telemetry, interpreter mode for Triton on CPU machines."""

import os
from pathlib import Path

import pytest

os.environ.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")
os.environ.setdefault("DO_NOT_TRACK", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

_GPU_DESELECTED: list[str] = []

# The test files that take longest, longest first (seconds of each file run alone with --durations on a 2-core
# machine, docs/testing.md). `make test` hands whole files to its two workers in collection order
# (--dist loadfile --no-loadscope-reorder): the long files start first and the many short ones fill in at the end,
# instead of a long file starting last with the other worker idle. Only the order: a file missing here runs after
# these, and a stale entry costs balance, never a test.
LONGEST_FILES = (
    "test_faults_stops.py",
    "test_openai_policy.py",
    "test_dask_evaluator.py",
    "test_deployment.py",
    "test_evaluator_pool.py",
    "test_faults_prefect.py",
    "test_faults_damage.py",
    "test_flow_resume.py",
    "test_export.py",
    "test_evaluator.py",
    "test_async_training.py",
    "test_openenv_server.py",
    "test_flows.py",
    "test_solutions.py",
    "test_sft.py",
    "test_small_sizes.py",
    "test_rag_retrieval.py",
    "test_run_ownership.py",
    "test_training.py",
    "test_curriculum.py",
)


# The fast tier (`make test-fast`, docs/testing.md) is every test not marked `heavy`. A test is heavy when it starts
# what costs seconds of CPU each time (an evaluator worker pool, a Prefect API server, a subprocess of our CLI or of any
# other Python interpreter) or when it takes more than a few seconds in this process (a training loop, an index
# build). The hook below marks it so when it uses a fixture of HEAVY_FIXTURES (directly or through another fixture),
# when HEAVY names its file, its class or itself, or when it is marked `alone` or `gpu`. What the lists miss, the fast
# tier's guard (tests/fast_tier.py) catches: a test it runs that starts an interpreter, a pool or a server fails there,
# naming what it started. tests/test_fast_tier.py checks every entry still names a file and a test.
HEAVY_FIXTURES = {  # each fixture, and the kind of HEAVY_GROUPS its cost is
    "shared_cpu_pool": "evaluator pools and sandbox children",  # a warm evaluator pool (shared_evaluator borrows it)
    # the session's Prefect API server (tests/prefect_session.py), as the flow files name it
    "prefect_api": "servers and processes killed or signalled on purpose",
    "tiny_policy": "long in this process",  # a tiny local model built, saved and sampled from (tests/test_envs.py)
}
# Paths under tests/: "FILE" for the whole file, "FILE::NAME" for a test function or class of it (every parameter),
# by what makes them heavy (the key is the kind `tests/cpu_profile.py` reports their CPU under).
HEAVY_GROUPS: dict[str, tuple[str, ...]] = {
    "evaluator pools and sandbox children": (  # in their own code or module fixtures
        "test_borrowed_pool.py", "test_compute_account.py", "test_dask_evaluator.py", "test_eval_fastpath.py",
        "test_eval_tempdirs.py", "test_evaluator.py", "test_evaluator_pool.py", "test_export.py", "test_floor_service.py",
        "test_node_versions.py", "test_paired_reference.py", "test_pool_start.py", "test_problem_audit_inputs.py",
        "test_sandbox_isolation.py", "test_solutions.py", "test_trace.py",
        "hacks/test_bench_tools.py::test_a_cpu_run_of_the_mix_judges_each_candidate_and_reports_our_pool_alone",
        "hacks/test_generated_classes.py::test_generated_case_earns_nothing",
        "hacks/test_generated_classes.py::test_known_good_stays_correct_and_wrong_is_a_mismatch",
        "hacks/test_hacks.py::test_exfiltration_candidate_finds_nothing",
        "hacks/test_hacks.py::test_hack_earns_nothing_and_leaves_evaluator_healthy",
        "hacks/test_hacks.py::test_runtime_layer_alone_stops_what_slips_past_the_static_policy",
        "test_discriminating_inputs.py::test_a_problem_whose_every_input_set_zeros_pass_gets_no_verdict",
        "test_fused_compare.py::test_fused_kernel_judges_as_the_torch_path_on_adversarial_outputs",
        "test_kernel_provenance.py::test_the_child_counts_launches_of_the_candidates_own_triton_functions_only",
        "test_kernrl_solutions.py::test_solutions_match_kernrl_problem_files",
        "test_sensitivity.py::test_partial_work_passes_the_problems_own_inputs_without_the_sensitivity_seeds",
        "test_timing_fidelity.py::TestStopped",
        "test_unobservable_calls.py::test_every_forward_sees_the_same_stack_whatever_the_call_is_for",
    ),
    # servers (Prefect's, the environment's, serve's)
    "servers and processes killed or signalled on purpose": (
        "test_crashed_runs.py", "test_deployment.py", "test_env_requests.py", "test_fault_matrix.py",
        "test_faults_damage.py", "test_faults_env.py", "test_faults_prefect.py", "test_faults_stops.py",
        "test_flow_resume.py", "test_flows.py", "test_kernrl_client.py", "test_openai_bad_answers.py",
        "test_openai_policy.py", "test_openenv_server.py", "test_openenv_service.py", "test_prefect_home.py",
        "test_run_ownership.py", "test_serve.py", "test_store_processes.py",
        "test_leftover_sweep.py",  # forks a candidate's stand-ins and lets the sweep stop and kill them
    ),
    "subprocesses of the CLI, bench/ and examples/": (
        "test_cli_imports.py", "test_cli_problems.py", "test_cosmetics.py", "test_cpu_profile.py",
        "test_damage_checksums.py", "test_eval_cli.py", "test_gpu_tests_row.py", "test_kernelbench_sweep.py",
        "test_trl_integration.py", "test_unwritable_outputs.py",
        "test_cli_exit_codes.py::test_serve_on_a_taken_port_exits_busy_as_its_help_says",
        "test_cli_options.py::test_a_problem_limit_below_one_is_refused",
        "test_cli_options.py::test_retrieve_refuses_a_top_k_below_one",
        "test_cli_sql.py::test_sql_gets_in_while_another_process_writes",
        "test_cli_sql.py::test_the_installed_command_prints_rows_and_exits_non_zero_on_errors",
        "test_config.py::test_pipeline_checks_its_inputs_before_any_stage",
        "test_config.py::test_train_cli_reports_a_bad_key_in_one_sentence",
        "test_grpo_batch.py::test_bad_input_exits_2_with_one_sentence",
        "test_grpo_batch.py::test_cpu_dry_run_on_bundled_problems",
        "test_kernrl_problems.py::test_a_prefix_of_several_ids_names_them_and_a_wrong_name_is_unknown",
        "test_kernrl_problems.py::test_eval_dir_maps_files_named_by_kernrl_ids",
        "test_problem_floor.py::test_problems_show_floor_prints_json_for_relu_at_real_size",
        "test_problem_floor.py::test_profile_needs_a_gpu_and_says_so_in_one_sentence",
        "test_problem_suites.py::test_eval_model_takes_problems_root",
        "test_problem_suites.py::test_ids_print_in_their_suites_form",
        "test_rag_verify.py::test_our_relu_solution_is_reverified_and_only_it_enters_a_verified_only_index",
    ),
    # training loops, a tiny model's training and sampling, index builds, every problem at its small size, real-size
    # inputs
    "long in this process": (
        "test_async_training.py", "test_checkpoint_eval.py", "test_cli_train_progress.py", "test_cookbook_controls.py",
        "test_rag_retrieval.py", "test_rl_resume.py", "test_rl_step_bench.py", "test_sft.py", "test_small_sizes.py",
        "test_training.py", "test_policy_local.py",
        "test_kernelbench_parity.py::test_same_init_inputs_and_input_shapes_at_real_size",
        "test_curriculum.py::test_earlier_levels_keep_their_share_of_the_problems",
        "test_curriculum.py::test_loop_records_promotions_and_a_resumed_run_keeps_its_stage",
        "test_kernrl_problems.py::test_small_sizes_keep_every_reference_fast_on_the_cpu",
    ),
}
HEAVY = tuple(entry for entries in HEAVY_GROUPS.values() for entry in entries)

TESTS_DIR = Path(__file__).resolve().parent


def heavy_reason(nodeid_path: str, names, fixture_names, marker_names) -> str | None:
    """Why a test belongs to the heavy tier, or None for the fast tier. `nodeid_path`: its file under tests/;
    `names`: its class (if any) and function, without parameters."""
    for marker in ("alone", "gpu"):
        if marker in marker_names:
            return f"marked {marker}"
    listed = {nodeid_path, *(f"{nodeid_path}::{name}" for name in names)}.intersection(HEAVY)
    if listed:
        return f"{min(listed)} is in HEAVY"
    used = sorted(set(HEAVY_FIXTURES).intersection(fixture_names))
    if used:
        return "uses " + ", ".join(used)
    return None


def heavy_kind(reason: str | None) -> str:
    """The kind of cost a heavy_reason names: a key of HEAVY_GROUPS, "marked alone" or "marked gpu", or the fast tier
    (None)."""
    if reason is None:
        return "fast tier: starts nothing"
    if reason.startswith("marked "):
        return reason
    if reason.endswith(" is in HEAVY"):
        entry = reason.removesuffix(" is in HEAVY")
        return next(kind for kind, entries in HEAVY_GROUPS.items() if entry in entries)
    return HEAVY_FIXTURES[reason.removeprefix("uses ").split(", ")[0]]


def pytest_itemcollected(item):
    """Mark a heavy test as it is collected: before any pytest_collection_modifyitems, so `-m "not heavy"` sees it."""
    try:
        path = item.path.resolve().relative_to(TESTS_DIR).as_posix()
    except ValueError:  # a test outside tests/ (a pytester run): only its fixtures and marks decide
        path = item.path.name
    names = [part.split("[")[0] for part in item.nodeid.split("::")[1:]]
    reason = heavy_reason(path, names, getattr(item, "fixturenames", ()), {mark.name for mark in item.iter_markers()})
    if reason is not None:
        item.add_marker(pytest.mark.heavy(reason=reason))


def pytest_configure(config):
    config.addinivalue_line("markers", "heavy: starts an evaluator pool, a server or a Python subprocess, takes long "
                            "in-process, or is marked alone or gpu (tests/conftest.py marks it); make test-fast leaves "
                            "it out")


class SharedCpuPool:
    """One warm CPU evaluation pool per test process (each pytest-xdist worker has its own), started at first use
    with the default shape for device="cpu" and lent to the evaluators of tests that do not care whose pool it is
    (a pool's start costs seconds of CPU). A pool that was closed, or whose worker kept dying past its restarts, is
    replaced by a fresh one at the next borrow."""

    def __init__(self) -> None:
        self._pool = None
        self.started = 0

    @property
    def pool(self):
        from kernelbench_rl.evaluation.front.pool import WorkerPool, pool_shape

        current = self._pool
        if current is not None and not current.closed and all(s.restarts <= current.max_restarts for s in current.slots):
            return current
        if current is not None:
            current.close()
        parallel, in_flight, warm = pool_shape("cpu")
        self._pool = WorkerPool("cpu", parallel_compiles=parallel, in_flight=in_flight, warm_children=warm)
        self.started += 1
        return self._pool

    def evaluator(self, settings=None, **kwargs):
        """An Evaluator on the shared pool: the Evaluator's own arguments but none of a pool's shape (its settings'
        device must be "cpu"); closing it leaves the pool running."""
        from kernelbench_rl.evaluation.front.api import Evaluator
        from kernelbench_rl.evaluation.result import EvalSettings

        return Evaluator(settings or EvalSettings(device="cpu"), pool=self.pool, **kwargs)

    def close(self) -> None:
        if self._pool is not None:
            self._pool.close()
            self._pool = None


@pytest.fixture(scope="session")
def shared_cpu_pool():
    """This test process's shared CPU pool (SharedCpuPool), closed at the end of the run."""
    lender = SharedCpuPool()
    yield lender
    lender.close()


@pytest.fixture(scope="session")
def shared_evaluator(shared_cpu_pool):
    """`shared_evaluator(settings, **evaluator_kwargs)`: an Evaluator that borrows the shared CPU pool. For tests that
    build a CPU evaluator of the default shape and neither own, stop, count nor inspect its workers."""
    return shared_cpu_pool.evaluator


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _longest_first(items) -> None:
    """Files in LONGEST_FILES first, in its order; the rest after them as collected."""
    rank = {name: position for position, name in enumerate(LONGEST_FILES)}
    order = {id(item): (rank.get(item.path.name, len(rank)), index) for index, item in enumerate(items)}
    items.sort(key=lambda item: order[id(item)])


@pytest.hookimpl(trylast=True)  # after pytest's own reordering by fixture scope, so the files' order stands
def pytest_collection_modifyitems(config, items):
    """Tests marked `gpu` need a CUDA device: where there is none they are not run at all (deselected, named in
    the summary), instead of each showing as a skip that hides the skips which mean something."""
    _longest_first(items)
    gpu = [item for item in items if item.get_closest_marker("gpu") is not None]
    if not gpu or _cuda_available():
        return
    gpu_ids = {id(item) for item in gpu}
    items[:] = [item for item in items if id(item) not in gpu_ids]
    config.hook.pytest_deselected(items=gpu)
    _GPU_DESELECTED.extend(item.nodeid for item in gpu)


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error):
    """pytest-xdist: each worker collected on its own; its deselected GPU tests come back with its output."""
    _GPU_DESELECTED.extend(getattr(node, "workeroutput", {}).get("gpu_deselected", []))


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    names = sorted(set(_GPU_DESELECTED))
    if names:
        terminalreporter.write_line(f"{len(names)} GPU test(s) not run: no CUDA device here "
                                    "(bash bench/device_suite.sh gpu-tests runs them on a GPU machine)")


def pytest_sessionfinish(session, exitstatus):
    """A multiprocessing child a test left alive holds the interpreter at exit (multiprocessing joins its
    non-daemon children then): the run would hang after its summary. Kill such children and fail the run."""
    workeroutput = getattr(session.config, "workeroutput", None)  # set in a pytest-xdist worker
    if workeroutput is not None:
        workeroutput["gpu_deselected"] = list(_GPU_DESELECTED)
    import multiprocessing

    left = []
    for child in multiprocessing.active_children():
        child.join(timeout=2.0)  # one being reaped right now is not a leak
        if child.is_alive():
            left.append(child)
            child.kill()
            child.join(timeout=5.0)
    if left:
        names = ", ".join(f"{child.name} (pid {child.pid})" for child in left)
        print(f"\nthe tests left {len(left)} child process(es) alive, killed now: {names}")
        session.exitstatus = 1


def pytest_unconfigure(config):
    """The run is over: should the interpreter's exit hang (a thread or process nobody stopped), print where every
    thread stands and exit non-zero after two minutes, instead of holding CI until its limit with nothing said."""
    import faulthandler
    import sys

    if "mutmut" in sys.modules:  # the mutation run calls pytest again and again in one process (make mutation)
        return
    faulthandler.dump_traceback_later(120, exit=True, file=sys.__stderr__)
