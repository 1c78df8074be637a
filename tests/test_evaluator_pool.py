"""The worker pool: a killed worker is replaced, its request retried, never blamed on the kernel."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from proc_tree import descendants, still_alive_after

from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.front.pool import WorkerPool
from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings
from kernelbench_rl.evaluation.sandbox.sandbox import is_secret_name, scrubbed_env
from kernelbench_rl.problems import get_problem, load_solution

SETTINGS = EvalSettings(device="cpu", timeout_s=60)
RELU = load_solution(get_problem("L1/19"))
# Slow on its first call in a process only: long enough to be caught holding the request, and the retry on a new
# worker (a new child) waits once more, not on every correctness and timing call.
SLOW_RELU = "_FIRST_CALL_SLEEP_S = [4.0]\n" + RELU.replace(
    "x = x.contiguous()",
    "import time\n        time.sleep(_FIRST_CALL_SLEEP_S.pop() if _FIRST_CALL_SLEEP_S else 0.0)\n        x = x.contiguous()")


def test_killed_worker_is_replaced_and_the_request_retried():
    with Evaluator(SETTINGS, static_checks=False) as ev:
        ev.start()
        first_pid = ev.pool.worker_pids[0]
        box: dict = {}
        thread = threading.Thread(target=lambda: box.update(r=ev.evaluate([EvalRequest("L1/19", SLOW_RELU, SETTINGS)])))
        thread.start()
        # Killed once the worker holds the request (its answer is seconds away: the candidate sleeps in forward).
        _until(lambda: bool(ev.pool.slots[0].inflight) or not thread.is_alive(), timeout_s=180)
        assert thread.is_alive(), "the request was answered before the worker could be killed"
        os.kill(first_pid, signal.SIGKILL)
        thread.join(timeout=240)
        assert not thread.is_alive()
        result = box["r"][0]
        # Retried on the replacement worker, so it passes: a lost worker is neither a kernel fault nor, on its
        # first loss, a request given up as infra.
        assert result.error_category == ErrorCategory.OK and result.correct, result.error_message
        assert ev.pool.worker_pids and ev.pool.worker_pids[0] != first_pid
        again = ev.evaluate([EvalRequest("L1/19", RELU, SETTINGS)])[0]
        assert again.correct, again.error_message


def test_a_worker_that_cannot_start_gives_infra_not_a_kernel_fault():
    import dataclasses

    import torch

    if torch.cuda.is_available():
        pytest.skip("this test is about machines without a GPU")
    # A CUDA worker on a machine without a GPU fails at start-up, every time.
    pool = WorkerPool("cuda", num_workers=1, max_restarts=1)
    try:
        payload = {
            "problem_id": "L1/19", "candidate_source": RELU, "candidate_sha256": "x",
            "settings": dataclasses.asdict(SETTINGS), "problem_source": get_problem("L1/19").source_for("small"),
            "baseline": None,
        }
        answer = pool.submit(payload, timeout_s=30).result(timeout=240)
        assert "infra" in answer
    finally:
        pool.close()


def test_results_come_back_in_request_order_with_parallel_children():
    wrong = RELU.replace("tl.maximum(x, 0.0)", "x * 0.5")  # not x: KernelBench's ReLU inputs are in [0, 1)
    requests = [EvalRequest("L1/19", src, SETTINGS) for src in (RELU, wrong, RELU + "\n# b\n", wrong + "\n# b\n")]
    with Evaluator(SETTINGS, static_checks=False, parallel_compiles=2) as ev:
        results = ev.evaluate(requests)
    assert [r.correct for r in results] == [True, False, True, False]
    assert [r.candidate_sha256 for r in results] == [r.candidate_sha256 for r in requests]


def test_scrubbed_env_drops_secrets_and_keeps_what_cuda_needs():
    env = scrubbed_env(
        {"PATH": "/bin", "TINKER_API_KEY": "tml-x", "HF_TOKEN": "hf", "AWS_SECRET_ACCESS_KEY": "a",
         "CUDA_VISIBLE_DEVICES": "1", "TRITON_CACHE_DIR": "/c", "MY_PASSWORD": "p", "TRITON_API_TOKEN": "t",
         "RANDOM_THING": "r"},
        HOME="/tmp/h",
    )
    assert env == {"PATH": "/bin", "CUDA_VISIBLE_DEVICES": "1", "TRITON_CACHE_DIR": "/c", "HOME": "/tmp/h"}
    assert is_secret_name("github_token") and not is_secret_name("CUDA_HOME")


def test_worker_side_imports_nothing_of_the_orchestration_stack():
    import subprocess
    import sys

    code = (
        "import sys, kernelbench_rl.evaluation.worker.worker, kernelbench_rl.evaluation.sandbox.child\n"
        "bad = sorted({m.split('.')[0] for m in sys.modules} & {'duckdb', 'polars', 'prefect', 'pyarrow', 'typer'})\n"
        "print(','.join(bad))"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == ""


def test_parallel_compiles_follow_the_cpu_cores(monkeypatch):
    from kernelbench_rl.evaluation.front import pool

    monkeypatch.setattr(pool.os, "sched_getaffinity", lambda _pid: set(range(16)))
    assert pool.default_parallel_compiles("cuda", 1) == 8
    assert pool.default_parallel_compiles("cuda", 8) == 2  # 2 cores per GPU: never below two
    monkeypatch.setattr(pool.os, "sched_getaffinity", lambda _pid: set(range(128)))
    assert pool.default_parallel_compiles("cuda", 1) == 12  # capped
    assert pool.default_parallel_compiles("cuda", 8) == 8
    assert pool.default_parallel_compiles("cpu", 1) == 2


def _until(condition, timeout_s: float = 10.0) -> None:
    """Poll instead of sleeping a guessed amount: threads start late on a loaded CI machine."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for the threads to line up"
        time.sleep(0.005)


def test_memory_budget_bounds_what_children_hold_and_serves_in_order():
    from kernelbench_rl.evaluation.worker.worker import MemoryBudget

    budget = MemoryBudget(100)
    held: list[int] = []
    peak = [0]
    order: list[str] = []
    lock = threading.Lock()
    release_a = threading.Event()

    def job(name: str, nbytes: int) -> None:
        with budget.hold(nbytes):
            with lock:
                order.append(name)
                held.append(nbytes)
                peak[0] = max(peak[0], sum(held))
            if name == "a":
                release_a.wait(10)
            with lock:
                held.remove(nbytes)

    threads = [threading.Thread(target=job, args=("a", 60))]
    threads[0].start()
    _until(lambda: order == ["a"])
    for waiting, (name, nbytes) in enumerate((("b", 60), ("c", 10), ("huge", 500)), start=1):
        threads.append(threading.Thread(target=job, args=(name, nbytes)))
        threads[-1].start()
        _until(lambda: len(budget._queue) == waiting)  # queued in this order
    assert order == ["a"]  # c fits beside a, but waits its turn behind b (no starvation)
    release_a.set()
    for thread in threads:
        thread.join(10)
    assert order == ["a", "b", "c", "huge"]
    assert peak[0] <= 100 or peak[0] == 500  # never over budget, except a request bigger than it, alone
    assert budget.used == 0


def test_device_queue_serves_in_arrival_order_but_problem_sizing_first():
    from kernelbench_rl.evaluation.worker.worker import DeviceQueue

    device = DeviceQueue()
    order: list[str] = []
    release_first = threading.Event()

    def job(name: str, priority: int) -> None:
        with device.hold(priority):
            order.append(name)
            if name == "timing-1":
                release_first.wait(10)

    threads = [threading.Thread(target=job, args=("timing-1", DeviceQueue.NORMAL))]
    threads[0].start()
    _until(lambda: order == ["timing-1"])
    queued = (("timing-2", DeviceQueue.NORMAL), ("timing-3", DeviceQueue.NORMAL), ("sizing", DeviceQueue.URGENT),
              ("timing-4", DeviceQueue.NORMAL))
    for waiting, (name, priority) in enumerate(queued, start=1):
        threads.append(threading.Thread(target=job, args=(name, priority)))
        threads[-1].start()
        _until(lambda: len(device._waiting) == waiting)
    assert order == ["timing-1"]  # exclusive
    release_first.set()
    for thread in threads:
        thread.join(10)
    assert order == ["timing-1", "sizing", "timing-2", "timing-3", "timing-4"]


def test_an_evaluation_that_must_run_alone_waits_for_the_others_and_holds_back_new_ones():
    from kernelbench_rl.evaluation.worker.worker import SharedOrAlone

    residency = SharedOrAlone()
    events: list[str] = []
    lock = threading.Lock()
    release_a = threading.Event()

    def log(text: str) -> None:
        with lock:
            events.append(text)

    def sharer(name: str) -> None:
        with residency.shared():
            log(f"{name} in")
            if name == "a":
                release_a.wait(10)
            log(f"{name} out")

    def loner() -> None:
        with residency.alone():
            log("alone in")
            log("alone out")

    first = threading.Thread(target=sharer, args=("a",))
    first.start()
    _until(lambda: events == ["a in"])
    waiting = threading.Thread(target=loner)
    waiting.start()
    _until(lambda: residency._waiting_alone == 1)
    late = threading.Thread(target=sharer, args=("b",))  # arrives while the loner waits
    late.start()
    time.sleep(0.2)
    assert events == ["a in"]  # the late sharer is held back behind the loner
    release_a.set()
    for thread in (first, waiting, late):
        thread.join(10)
    assert events == ["a in", "a out", "alone in", "alone out", "b in", "b out"]


def test_only_device_oom_faults_earn_a_run_alone():
    from kernelbench_rl.evaluation.result import EvalResult
    from kernelbench_rl.evaluation.worker.worker import ran_out_of_device_memory

    def result(category: ErrorCategory, message: str) -> EvalResult:
        return EvalResult(problem_id="L1/19", candidate_sha256="", backend="triton", precision="fp32", device_kind="cuda",
                          error_category=category, error_message=message)

    assert ran_out_of_device_memory(result(ErrorCategory.RUNTIME, "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"))
    assert not ran_out_of_device_memory(result(ErrorCategory.CRASH, "used more than 4096 MB of host memory while running forward"))
    assert not ran_out_of_device_memory(result(ErrorCategory.MISMATCH, "CUDA out of memory"))
    assert not ran_out_of_device_memory(result(ErrorCategory.RUNTIME, "illegal memory access"))


_MEET = """
        import ctypes, time
        global _met
        if not globals().get("_met"):
            _met = True
            ctypes.CDLL(None).prctl(15, b"{name}", 0, 0, 0)  # PR_SET_NAME: seen from outside in /proc/<pid>/comm
            time.sleep(6)
        x = x.contiguous()"""


def _most_at_once(name: str, stop: threading.Event, seen: list[int]) -> None:
    """The most live processes named `name` at any one look, polled until `stop`."""
    while not stop.is_set():
        count = 0
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                try:
                    with open(f"/proc/{entry}/comm") as handle:
                        count += handle.read().strip() == name
                except OSError:
                    pass
        seen.append(count)
        time.sleep(0.05)


def test_evaluations_past_compiling_hold_no_compile_slot():
    """One compile slot, three evaluations under way: all three are in their forward at once (seen from outside,
    by the name each gives its process), so a child past compiling (on a GPU: queued for the device) leaves the slot
    to the next. (The candidates cannot meet by themselves: nothing writable is shared between them.)"""
    name = "kbrlmeet" + os.urandom(3).hex()
    meet = RELU.replace("x = x.contiguous()", _MEET.format(name=name).strip("\n").lstrip(), 1)
    requests = [EvalRequest("L1/19", meet + f"\n# copy {i}\n", SETTINGS) for i in range(3)]
    stop, seen = threading.Event(), []
    watcher = threading.Thread(target=_most_at_once, args=(name, stop, seen), daemon=True)
    watcher.start()
    try:
        with Evaluator(SETTINGS, static_checks=False, parallel_compiles=1, in_flight=3) as ev:
            results = ev.evaluate(requests)
    finally:
        stop.set()
        watcher.join()
    assert [r.error_message for r in results] == ["", "", ""]
    assert all(r.correct for r in results)
    assert max(seen) == 3


def test_a_gpu_childs_host_memory_limit_grows_only_for_tensors_that_cross_through_host_memory():
    """Over CUDA IPC the sandbox's limit stands as set (the H100/H200 red team's 6 GiB host hoard hid
    under an allowance for 13 GB of file-spilled tensors and ran into the timeout instead)."""
    from kernelbench_rl.evaluation.worker.worker import host_memory_limit_mb

    tensors = 12_884_901_888  # L1/19 at full size: 6 GiB in, 6 GiB out
    assert host_memory_limit_mb(4096, "ipc", tensors) == 4096
    assert host_memory_limit_mb(4096, "file", tensors) == 4096 + 2 * 12_288
    assert host_memory_limit_mb(4096, "pipe", tensors) == 4096 + 2 * 12_288


_ORPHAN_SCRIPT = '''
import sys, threading, time
from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings
from kernelbench_rl.problems import get_problem, load_solution
settings = EvalSettings(device="cpu", timeout_s=300)
hang = load_solution(get_problem("L1/19")).replace("x = x.contiguous()", "import time\\n        time.sleep(600)\\n        x = x.contiguous()")
ev = Evaluator(settings, static_checks=False)
ev.start()
print(ev.pool.worker_pids[0], flush=True)
threading.Thread(target=lambda: ev.evaluate([EvalRequest("L1/19", hang, settings)]), daemon=True).start()
time.sleep(600)
'''


def test_when_the_orchestrator_dies_its_worker_kills_a_running_candidate_at_once():
    """A hung (or memory-hoarding) candidate must not outlive the process that wanted its result."""
    import subprocess
    import sys

    orchestrator = subprocess.Popen([sys.executable, "-c", _ORPHAN_SCRIPT], stdout=subprocess.PIPE, text=True,
                                    cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    try:
        worker_pid = int(orchestrator.stdout.readline())
        _wait_for_a_running_child(worker_pid)
        family = descendants(worker_pid) | {worker_pid}
        assert len(family) >= 3
    finally:
        orchestrator.kill()
        orchestrator.wait()
    assert not still_alive_after(family, 30)  # far below the candidate's 300 s timeout


def test_once_the_worker_is_stopping_no_candidate_starts():
    """The orchestrator died before a job took its child: that child would start its candidate after the sweep of
    running children, with nobody left to stop it. No child starts once the worker is stopping."""
    from kernelbench_rl.evaluation.worker.worker import Worker, WorkerConfig, WorkerStopping

    worker = Worker(WorkerConfig(device="cpu", warm_children=1))
    try:
        worker.kill_running_children()
        with pytest.raises(WorkerStopping):
            worker.take_child()
        assert not worker.children.running
    finally:
        worker.shutdown()


_WEDGED_STOP_SCRIPT = """
import threading
from kernelbench_rl.evaluation.worker import worker as w, worker_process
worker = w.Worker(w.WorkerConfig(device="cpu", warm_children=1))
child = worker.take_child()
print(child.pid, worker.children.warm[0].pid, flush=True)
worker.children.warm_lock.acquire()  # a stop that hangs: kill_running_children waits on this lock for ever
timer = threading.Timer(1.0, worker_process._abandon, args=(worker,))
timer.daemon = True
timer.start()
worker.kill_running_children()
print("unreachable", flush=True)
"""


def test_a_worker_whose_stop_hangs_kills_its_children_and_exits_anyway():
    """The last resort after STOP_GRACE_S: whatever wedged the orderly stop, no child outlives it."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", _WEDGED_STOP_SCRIPT], capture_output=True, text=True, timeout=120,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "unreachable" not in proc.stdout
    assert "did not stop" in proc.stderr and "kill_running_children" in proc.stderr  # where it hung, for the log
    pids = {int(p) for p in proc.stdout.split()[:2]}
    assert not still_alive_after(pids, 10)


def _wait_for_a_running_child(worker_pid: int) -> None:
    """Until the worker has its forkserver, a pre-started child and the job's child, and a little more
    (the job's child is then asleep inside forward)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and len(descendants(worker_pid)) < 3:
        time.sleep(0.5)
    time.sleep(3)


def test_a_running_candidate_dies_with_its_killed_worker():
    """Children sit in their own sessions, out of reach of a kill of the worker's process group; the
    kernel's parent-death signal takes them down when the worker (and so its forkserver) is gone."""
    settings = EvalSettings(device="cpu", timeout_s=300)
    hang = RELU.replace("x = x.contiguous()", "import time\n        time.sleep(600)\n        x = x.contiguous()")
    ev = Evaluator(settings, static_checks=False, parallel_compiles=2)
    try:
        ev.start()
        worker_pid = ev.pool.worker_pids[0]
        threading.Thread(target=lambda: ev.evaluate([EvalRequest("L1/19", hang, settings)]), daemon=True).start()
        _wait_for_a_running_child(worker_pid)
        family = descendants(worker_pid)
        assert len(family) >= 2
        os.kill(worker_pid, signal.SIGKILL)
        assert not still_alive_after(family, 30)
    finally:
        ev.close()


def test_closing_the_evaluator_mid_hang_leaves_no_candidate_behind():
    settings = EvalSettings(device="cpu", timeout_s=300)
    hang = RELU.replace("x = x.contiguous()", "import time\n        time.sleep(600)\n        x = x.contiguous()")
    ev = Evaluator(settings, static_checks=False, parallel_compiles=2)
    ev.start()
    worker_pid = ev.pool.worker_pids[0]
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(r=ev.evaluate([EvalRequest("L1/19", hang, settings)])), daemon=True)
    thread.start()
    _wait_for_a_running_child(worker_pid)
    family = descendants(worker_pid) | {worker_pid}
    ev.close()
    thread.join(30)
    assert box["r"][0].error_category == ErrorCategory.INFRA  # abandoned, never a kernel verdict
    assert not still_alive_after(family, 30)


def test_a_close_that_does_not_wait_returns_before_the_workers_go_and_leaves_no_process_behind(tmp_path):
    ev = Evaluator(SETTINGS, static_checks=False, parallel_compiles=2)
    ev.start()
    assert ev.evaluate([EvalRequest("L1/19", RELU, SETTINGS)])[0].correct
    worker_pid = ev.pool.worker_pids[0]
    family = descendants(worker_pid) | {worker_pid}
    assert len(family) > 1  # the worker and its zygote and pre-started children
    home = ev.pool.home
    ev.close(wait=False)
    assert not os.path.exists(home)  # the pool's folder goes at once
    assert not still_alive_after(family, 30)  # each worker stops on its own, its children with it
