"""The evaluator sharing its GPU with a policy that is sampled and trained on it.

The worker reads the device's free memory once, at its start; a policy in the orchestrator's process
grows after that (the sampler's copy of the weights, prompt logits, training activations). Admission
must neither plan with memory the policy will hold nor admit into memory it has taken since. The
budget is real here; only the device's free bytes are a number the test sets.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from kernelbench_rl.config import load_config
from kernelbench_rl.evaluation.worker import scheduling
from kernelbench_rl.evaluation.verdict.faults import child_oom_fault, oom_not_the_candidates
from kernelbench_rl.evaluation.worker.memory import GIB
from kernelbench_rl.evaluation.result import ErrorCategory, EvalResult
from kernelbench_rl import compose
from kernelbench_rl.policy import memory


def _until(condition, timeout_s: float = 10.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the threads to line up"
        time.sleep(0.005)


def test_the_policys_reservation_is_kept_out_of_the_budget_beyond_what_it_already_holds():
    plain, _ = scheduling.device_budgets(70 * GIB, 3, 4, 2 * GIB)
    # The policy holds 7 GiB already (weights, counted in `free`), and may reach 19 GiB: 12 more are kept out.
    shared, alone = scheduling.device_budgets(70 * GIB, 3, 4, 2 * GIB, reserved_bytes=19 * GIB, others_hold=7 * GIB)
    assert plain.capacity - shared.capacity == int(0.92 * 70 * GIB) - int(0.92 * 58 * GIB)
    assert alone >= shared.capacity
    # A reservation it already holds in full changes nothing; so does none.
    held, _ = scheduling.device_budgets(70 * GIB, 3, 4, 2 * GIB, reserved_bytes=5 * GIB, others_hold=7 * GIB)
    assert held.capacity == plain.capacity
    # Never below a GiB, however much is reserved.
    tiny, _ = scheduling.device_budgets(8 * GIB, 3, 4, 2 * GIB, reserved_bytes=80 * GIB)
    assert tiny.capacity == GIB


def test_others_hold_what_is_neither_free_nor_the_workers_own():
    assert scheduling.held_by_others(free=60 * GIB, total=80 * GIB, own_bytes=GIB) == 19 * GIB
    assert scheduling.held_by_others(free=80 * GIB, total=80 * GIB, own_bytes=GIB) == 0


def test_admission_follows_the_devices_free_memory_when_another_process_grows():
    device_free = [40 * GIB]
    budget = scheduling.MemoryBudget(30 * GIB, free_probe=lambda: device_free[0], poll_s=0.01)
    assert budget.available() == 30 * GIB  # the fixed budget bounds it: 0.92 x 40 GiB is more
    admitted: list[str] = []

    def job(name: str, nbytes: int, release: threading.Event) -> None:
        with budget.hold(nbytes):
            admitted.append(name)
            release.wait(10)

    release_a, release_b = threading.Event(), threading.Event()
    first = threading.Thread(target=job, args=("a", 10 * GIB, release_a))
    first.start()
    _until(lambda: admitted == ["a"])
    device_free[0] -= 10 * GIB  # a's child took its bytes
    # The policy grows by 24 GiB: 6 GiB free now, of which 0.92 x 6 may be admitted beside a's 10.
    device_free[0] -= 24 * GIB
    assert budget.available() == int(0.92 * 6 * GIB)
    second = threading.Thread(target=job, args=("b", 8 * GIB, release_b))
    second.start()
    _until(lambda: len(budget._queue) == 1)
    time.sleep(0.05)
    assert admitted == ["a"]  # it fits the budget fixed at the start, not what the device has now
    device_free[0] += 24 * GIB  # the policy let go (or its peak passed): b goes in without anyone releasing
    _until(lambda: admitted == ["a", "b"])
    release_a.set()
    release_b.set()
    first.join(10)
    second.join(10)
    assert budget.used == 0


def test_with_nothing_admitted_a_request_runs_however_full_the_device_is():
    budget = scheduling.MemoryBudget(30 * GIB, free_probe=lambda: 1 * GIB, poll_s=0.01)
    done = threading.Event()

    def job() -> None:
        with budget.hold(20 * GIB):
            done.set()

    worker = threading.Thread(target=job)
    worker.start()
    assert done.wait(5)  # waiting would not make the device freer; an OOM alone is judged as ours
    worker.join(5)


def test_an_oom_the_policys_memory_caused_is_never_the_candidates():
    # The child held 3 GiB of its 12 GiB budget when the device ran out (the policy had taken the rest).
    fault = child_oom_fault("CUDA out of memory. Tried to allocate 2.00 GiB", {"reserved": 3 * GIB, "cap": 12 * GIB})
    result = EvalResult(problem_id="L1/1", candidate_sha256="", backend="triton", precision="fp32", device_kind="cuda",
                        error_category=fault.category, error_message=fault.message)
    assert oom_not_the_candidates(result)
    # Past its budget it is the candidate's, whoever else is on the device.
    greedy = child_oom_fault("CUDA out of memory. Tried to allocate 10.00 GiB", {"reserved": 6 * GIB, "cap": 12 * GIB})
    assert greedy.category == ErrorCategory.RUNTIME and "past its budget" in greedy.message


def _config(tmp_path: Path, *extra: str):
    return load_config("default", [f"db_path={tmp_path / 'kb.duckdb'}", f"log_dir={tmp_path / 'logs'}",
                                   "policy.backend=local", "problems.audit=false", *extra])


def test_the_reservation_is_estimated_only_where_the_local_policy_shares_the_evaluators_gpu(tmp_path: Path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"\0" * 4096)
    (model / "config.json").write_text('{"vocab_size": 1000, "max_position_embeddings": 32768, "hidden_size": 64, '
                                       '"num_hidden_layers": 3}')
    on_cpu = _config(tmp_path, f"policy.base_model={model}", "policy.device=cpu", "eval.device=cuda")
    assert compose.policy_memory_reservation(on_cpu) == (0, "")
    on_gpu = _config(tmp_path, f"policy.base_model={model}", "policy.device=cuda", "eval.device=cuda",
                     "sampling.max_tokens=512")
    reserved, _ = compose.policy_memory_reservation(on_gpu)
    # Two copies of the weights, one training sequence's logits and activations (2048 prompt + 512 completion
    # tokens; 34 bytes per token, hidden unit and layer), working memory; then the allocator's slack and the context.
    allocated = 2 * 4096 + 16 * 2560 * 1000 + 34 * 2560 * 64 * 3 + memory.POLICY_WORKING_BYTES
    assert reserved == int(allocated * (1 + memory.ALLOCATOR_SLACK)) + memory.CUDA_CONTEXT_BYTES
    # A process that runs no policy (the environment server) keeps no room for one.
    assert compose.policy_memory_reservation(on_gpu, policy_beside=False) == (0, "")
    remote = _config(tmp_path, "policy.backend=tinker", "policy.base_model=Qwen/Qwen3-8B", "eval.device=cuda")
    assert compose.policy_memory_reservation(remote) == (0, "")
    # Set by hand it applies whatever runs where; 0 turns it off.
    assert compose.policy_memory_reservation(_config(tmp_path, "eval.reserved_memory_gb=3", "eval.device=cpu"))[0] == 3 * GIB
    assert compose.policy_memory_reservation(_config(tmp_path, f"policy.base_model={model}", "policy.device=cuda",
                                                   "eval.device=cuda", "eval.reserved_memory_gb=0"))[0] == 0


def test_the_evaluator_hands_the_reservation_to_its_workers_and_the_run_id_ignores_it(tmp_path: Path):
    from kernelbench_rl.store import Store

    cfg = _config(tmp_path, "eval.device=cpu", "eval.reserved_memory_gb=2.5", "problems.ids=L1/19", "problems.levels=[1]")
    evaluator = compose.build_run_parts(cfg).evaluator.open(Store(cfg.db_path), [])
    try:
        assert evaluator.worker_args == ["--reserved-memory-gb", "2.500"]
    finally:
        evaluator.close()
    assert cfg.resolved_run_id() == _config(tmp_path, "eval.device=cpu", "problems.ids=L1/19",
                                            "problems.levels=[1]").resolved_run_id()


def test_the_worker_takes_the_reservation_from_the_arguments_the_evaluator_passes(tmp_path: Path):
    from kernelbench_rl.evaluation.worker.worker import argument_parser, config_from_args

    cfg = _config(tmp_path, "eval.device=cpu", "eval.reserved_memory_gb=2.5")
    reserved, _ = compose.policy_memory_reservation(cfg)
    worker_args = ["--device", "cuda", "--reserved-memory-gb", f"{reserved / GIB:.3f}", "--reserved-device-uuid", "GPU-1"]
    config = config_from_args(argument_parser().parse_args(worker_args), same_uid=False)
    assert config.reserved_memory_bytes == int(2.5 * GIB) and config.reserved_device_uuid == "GPU-1"
    assert config_from_args(argument_parser().parse_args([]), same_uid=False).reserved_memory_bytes == 0
