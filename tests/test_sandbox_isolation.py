"""The sandbox's promises between candidates and towards the host, on the real evaluator (CPU): nothing writable is
shared between candidates, nothing of the worker is reachable, and no process a candidate made outlives its verdict.
They must hold whoever runs the evaluator: here (CI, this machine) that is root."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "hacks"))

from hack_cases import CASES_BY_NAME, lingering_processes  # noqa: E402

from kernelbench_rl.evaluation.sandbox import sandbox  # noqa: E402
from kernelbench_rl.evaluation.front.api import Evaluator  # noqa: E402
from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings  # noqa: E402
from kernelbench_rl.problems import get_problem, load_solution  # noqa: E402

SETTINGS = EvalSettings(device="cpu", timeout_s=90)
RELU = load_solution(get_problem("L1/19"))

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox's filters are Linux-only")

# Does no work: answers from what earlier candidates stored in /dev/shm, keyed by the inputs (the seeds a problem
# keeps for a pool's life make that pay), and zeros otherwise.
_LOOKUP = '''
import hashlib, os
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def _token(x_ptr):
    pass


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        _token[(1,)](x)
        path = "/dev/shm/kbrl-answer-" + hashlib.sha256(x.detach().cpu().numpy().tobytes()).hexdigest()[:24]
        if os.path.exists(path):
            return torch.load(path).to(x.device)
        return torch.zeros_like(x)
'''


@pytest.fixture(scope="module")
def evaluator():
    with Evaluator(SETTINGS, num_workers=1, static_checks=False) as ev:
        yield ev


def test_a_candidate_cannot_answer_from_what_earlier_candidates_left_in_dev_shm(evaluator) -> None:
    store = CASES_BY_NAME["shm_answer_store"].source
    honest = [EvalRequest("L1/19", store + f"\n# copy {i}\n", SETTINGS) for i in range(4)]
    results = evaluator.evaluate(honest + [EvalRequest("L1/19", _LOOKUP, SETTINGS)])
    assert not any(r.error_category.value == "infra" for r in results)
    assert not results[-1].correct, "a candidate that did no work answered from /dev/shm"
    assert not list(Path("/dev/shm").glob("kbrl-answer-*")) if Path("/dev/shm").is_dir() else True


_LIMITED = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


def _forks():
    # Threads count toward RLIMIT_NPROC like processes, and start in microseconds where a fork of this process
    # takes a tenth of a second.
    import threading, time
    made = 0
    for _ in range(COUNT):
        try:
            threading.Thread(target=time.sleep, args=(30,), daemon=True).start()
        except RuntimeError:
            break
        made += 1
    return made


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, x):
        y = torch.empty_like(x)
        relu_kernel[(triton.cdiv(x.numel(), 1024),)](x, y, x.numel(), BLOCK=1024)
        if _forks() < COUNT:  # the limit stopped it: say so through the answer
            y.fill_(-1.0)
        return y
'''


@pytest.mark.alone  # its flood fills the uid every CPU evaluator's children share: a neighbour's could not fork
def test_a_candidate_meets_a_process_limit_and_leaves_no_process_behind(evaluator) -> None:
    """Root is exempt from RLIMIT_NPROC, so a root worker's children are never root: every child has a limit."""
    count = sandbox.CHILD_NPROC + 64
    # (One at a time: the limit is the uid's, so while the flood stands a neighbour of the same uid could not start
    # threads either; docs/evaluator.md, "Processes".)
    [result] = evaluator.evaluate([EvalRequest("L1/19", _LIMITED.replace("COUNT", str(count)), SETTINGS)])
    [honest] = evaluator.evaluate([EvalRequest("L1/19", RELU, SETTINGS)])
    # Past the limit the candidate answers wrong on purpose, or dies of it (a thread it needed could not start).
    assert not result.correct and result.error_category.value in ("mismatch", "crash", "runtime"), (
        result.error_category, result.error_message)
    assert "nproc=" in result.versions["sandbox"]
    if os.geteuid() == 0:
        assert "uid=nobody" in result.versions["sandbox"]
    assert not lingering_processes()
    assert honest.correct, honest.error_message  # the flood did not starve the next candidate


def test_lingering_processes_are_a_kernel_fault_and_killed_before_the_verdict(evaluator) -> None:
    source = CASES_BY_NAME["setsid_daemon"].source
    result, honest = evaluator.evaluate([EvalRequest("L1/19", source, SETTINGS), EvalRequest("L1/19", RELU, SETTINGS)])
    assert result.error_category.value == "runtime" and not result.correct
    assert "left" in result.error_message and "hack" in result.flags
    assert int(result.versions["processes_killed"]) >= 3  # its own children; its daemons were orphans (killed too)
    assert not lingering_processes()
    assert honest.correct and "processes_killed" not in honest.versions


def test_the_child_forgets_the_forkservers_address_and_pid() -> None:
    """The forkserver's address and pid are gone from the child's module state (the filter refuses sockets anyway)."""
    import subprocess
    import textwrap

    out = subprocess.run([sys.executable, "-c", textwrap.dedent("""
        from multiprocessing import forkserver
        from kernelbench_rl.evaluation.sandbox.child import _close_multiprocessing_fds
        forkserver._forkserver._forkserver_address = "\\0listener-1-1"
        forkserver._forkserver._forkserver_pid = 1
        _close_multiprocessing_fds()
        print(forkserver._forkserver._forkserver_address, forkserver._forkserver._forkserver_pid)
    """)], capture_output=True, text=True, timeout=60, cwd=Path(__file__).resolve().parents[1])
    assert out.stdout.split() == ["None", "None"], out.stderr


def test_the_process_count_of_a_uid_includes_threads_as_the_kernel_counts_them() -> None:
    """A child that keeps a non-root user's uid gets a limit of what that uid runs now plus its allowance: the count
    must be the kernel's (threads included), or the limit lands below what already runs and nothing can start."""
    import threading

    def counted_with_twenty_more() -> int:
        stop = threading.Event()
        threads = [threading.Thread(target=stop.wait) for _ in range(20)]
        before = sandbox.processes_of_uid(os.getuid())
        for thread in threads:
            thread.start()
        try:
            return sandbox.processes_of_uid(os.getuid()) - before
        finally:
            stop.set()
            for thread in threads:
                thread.join()

    # Other processes of this uid come and go meanwhile (a neighbouring test's, on a loaded host): one of a few
    # counts must show all twenty.
    seen = [counted_with_twenty_more() for _ in range(5)]
    assert max(seen) >= 20, seen


def test_the_worker_clock_check_flags_reported_times_its_own_clock_cannot_explain() -> None:
    """The check behind every GPU speedup: the worker's wall over a block of timed calls against the reference's."""
    from kernelbench_rl.evaluation.timing.decisions import BlockWall, host_clock_check

    # 60 calls each; the loop's own overhead (inputs, flush, synchronise) is 0.8 ms a call on both sides.
    reference = BlockWall(60 * (0.8 + 1.0) / 1000.0, 60, [1.0] * 50)
    honest = BlockWall(60 * (0.8 + 0.5) / 1000.0, 60, [0.5] * 50)  # really twice as fast
    faked = BlockWall(60 * (0.8 + 1.0) / 1000.0, 60, [1.0 / 3] * 50)  # as slow as the reference, reports 3x
    noisy = BlockWall(60 * (0.8 + 0.5) * 1.1 / 1000.0, 60, [0.5] * 50)  # an honest block whose wall ran 10% long
    # An honest kernel that holds memory: its fresh inputs reach cudaMalloc and the loop's overhead grows by a third.
    allocating = BlockWall(60 * (0.8 * 1.33 + 0.5) / 1000.0, 60, [0.5] * 50)
    assert host_clock_check(honest, reference)[0] is False
    assert host_clock_check(noisy, reference)[0] is False
    assert host_clock_check(allocating, reference)[0] is False
    disagrees, text = host_clock_check(faked, reference)
    assert disagrees and text.startswith("DISAGREES") and "1.0000 ms" in text
    assert host_clock_check(faked, None) == (False, "not checked: no timed calls on the worker's clock")


def test_a_cpu_verdict_says_it_is_no_verdict_about_the_gpu_or_the_real_size(evaluator) -> None:
    [result] = evaluator.evaluate([EvalRequest("L1/19", RELU, SETTINGS)])
    assert result.correct
    assert "says nothing about a GPU" in result.versions["scope"]


def test_what_children_leave_in_dev_shm_is_removed_but_live_ipc_reference_counts_stay(tmp_path, monkeypatch) -> None:
    """On a GPU with CUDA IPC a child may write /dev/shm (torch keeps IPC reference counts there): the worker removes
    what the children's uid left there once the child is retired, except what was there before and the reference
    counts of children still alive."""
    from kernelbench_rl.evaluation.worker import leftovers

    monkeypatch.setattr(leftovers, "SHARED_MEMORY", str(tmp_path))
    (tmp_path / "sem.mp-before").write_text("")
    keep = leftovers.shared_memory_entries()
    for name in ("kbrl-answer-1234", "torch_4242_99_0", "torch_777_1_0", "torch_worker_answers"):
        (tmp_path / name).write_text("x")
    (tmp_path / "nested").mkdir()
    removed = leftovers.sweep_shared_memory(os.getuid(), keep, live={4242})
    assert sorted(removed) == ["kbrl-answer-1234", "nested", "torch_777_1_0", "torch_worker_answers"]
    assert sorted(os.listdir(tmp_path)) == ["sem.mp-before", "torch_4242_99_0"]
    # Another uid's entries (the worker's own, when it is root) are not the children's.
    (tmp_path / "other").write_text("")
    assert leftovers.sweep_shared_memory(os.getuid() + 1, keep, live=set()) == []


def test_workers_of_different_gpus_never_share_a_uid(monkeypatch) -> None:
    """RLIMIT_NPROC counts a uid's tasks host-wide: with every GPU's worker as nobody, a four-GPU host's children
    together passed the limit and torch aborted in pthread_create. Each GPU's children take their own uid."""
    monkeypatch.delenv("KBRL_EVAL_HOST_SHARE", raising=False)
    seen = set()
    for gpu in ("0", "1", "2", "3"):
        monkeypatch.setenv("CUDA_VISIBLE_DEVICES", f"{gpu},0")  # (a Dask worker's list starts with its own GPU)
        seen.add(sandbox.unprivileged_uid())
    assert len(seen) == 4 and sandbox.UNPRIVILEGED_UID in seen
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-5d0c")  # a UUID: the worker's place on the host decides
    monkeypatch.setenv("KBRL_EVAL_HOST_SHARE", "2/4")
    assert sandbox.unprivileged_uid() == sandbox.UNPRIVILEGED_UID - 2


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another uid needs root")
def test_a_thread_flood_under_one_gpus_uid_leaves_another_gpus_children_their_whole_limit() -> None:
    """Two children as a root worker of GPU 0 and of GPU 1 would make them: different uids, and threads started under
    one are not counted against the other's RLIMIT_NPROC."""
    import subprocess
    import textwrap

    script = textwrap.dedent("""
        import getpass, os, sys, threading
        from torch._inductor.runtime.cache_dir_utils import default_cache_dir
        from kernelbench_rl.evaluation.sandbox import sandbox
        assert sandbox.drop_privileges(processes=64)  # (Python may live where nobody reads: imports come first)
        stop = threading.Event()
        started = 0
        if sys.argv[1] == "flood":
            for _ in range(200):
                try:
                    threading.Thread(target=stop.wait, daemon=True).start()
                    started += 1
                except RuntimeError:
                    break
            print(os.getuid(), started, flush=True)
            sys.stdin.readline()  # holds its threads until told
        else:
            assert getpass.getuser() and default_cache_dir()  # no account by that uid: torch still names its caches
            for _ in range(32):
                threading.Thread(target=stop.wait, daemon=True).start()
                started += 1
            print(os.getuid(), started, flush=True)
        stop.set()
    """)
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "0"}
    env.pop("KBRL_EVAL_HOST_SHARE", None)
    flood = subprocess.Popen([sys.executable, "-c", script, "flood"], cwd=root, env=env, text=True,
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    try:
        flood_uid, flood_started = map(int, flood.stdout.readline().split())
        assert flood_started < 200  # it met its limit
        neighbour = subprocess.run([sys.executable, "-c", script, "neighbour"], cwd=root, text=True, timeout=60,
                                   env={**env, "CUDA_VISIBLE_DEVICES": "1"}, capture_output=True)
        assert neighbour.returncode == 0, neighbour.stderr[-2000:]
        neighbour_uid, neighbour_started = map(int, neighbour.stdout.split())
        assert neighbour_uid != flood_uid and neighbour_started == 32
    finally:
        flood.stdin.close()
        flood.wait(timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="children change uid only under a root worker")
def test_a_gpu_workers_children_judge_under_a_uid_no_account_names(monkeypatch) -> None:
    """The worker of GPU 1 runs its children as 65533, which no account of this machine names: they start, import
    and judge as nobody's do (torch and getpass would otherwise look the uid up and fail)."""
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1")  # (the CPU pool passes its environment on as it is)
    assert sandbox.unprivileged_uid() == sandbox.UNPRIVILEGED_UID - 1
    with Evaluator(SETTINGS, num_workers=1, static_checks=False) as ev:
        [result] = ev.evaluate([EvalRequest("L1/19", RELU, SETTINGS)])
    assert result.correct, result.error_message
    assert "uid=nobody-1+" in result.versions["sandbox"] or "uid=nobody-1," in result.versions["sandbox"], result.versions["sandbox"]


def test_a_candidates_processes_count_as_its_own_after_its_child_died() -> None:
    """A child that dies before its sweep (its forkserver restarted, and it dies with its parent) leaves its children
    orphaned, adopted by the worker: they keep the child's session, so the sweep still counts them as the
    candidate's and the verdict still says it left processes behind (counted as mere orphans, it did not)."""
    import subprocess
    import textwrap

    script = textwrap.dedent("""
        import os, time
        from kernelbench_rl.evaluation.sandbox import sandbox
        from kernelbench_rl.evaluation.worker import leftovers
        assert leftovers.adopt_orphans()
        ready, told = os.pipe()
        child = os.fork()
        if child == 0:  # the candidate's child: a session of its own, the filter, three children, then it dies
            os.setsid()
            assert sandbox.block_sockets()
            for _ in range(3):
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
            os.write(told, b"x")
            os._exit(0)
        os.read(ready, 1)
        os.waitpid(child, 0)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and len(leftovers._below({os.getpid()}, leftovers._table())) < 3:
            time.sleep(0.01)
        swept = leftovers.sweep(child)
        print(swept.descendants, swept.orphans, flush=True)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         cwd=Path(__file__).resolve().parents[1])
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["3", "0"]
