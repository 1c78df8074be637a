"""The evaluation pool's start: the ready event says where the seconds went, the zygote starts before the
worker's imports, the rest of the warm children come after ready, and the private cache that remembers a
passing same-uid probe trusts only what this user wrote for exactly this machine."""

from __future__ import annotations

import json
import os
import time

import pytest

from kernelbench_rl import private_cache
from kernelbench_rl.evaluation.worker import same_uid, startup
from kernelbench_rl.evaluation.front.pool import WorkerPool

KEY = {"host": "h", "kernel": "6.1", "sources": "abc"}


def test_the_ready_event_carries_the_start_up_phases_and_the_zygote_imports_beside_the_worker():
    pool = WorkerPool("cpu", num_workers=1, warm_children=2)
    try:
        info = pool.wait_ready(120)[0]
        assert info.get("event") == "ready", pool.slots[0].last_failure
        seconds, timeline = info["startup_seconds"], info["startup_timeline"]
        for step in ("interpreter", "zygote_spawn", "worker_imports", "first_child"):
            assert step in seconds and seconds[step] >= 0, (step, seconds)
            start, end = timeline[step]
            assert 0 <= start <= end <= info["ready_after_s"] + 1e-3, (step, timeline)
        # The zygote started (and imports torch and Triton) before the worker's own imports were done.
        assert timeline["zygote_spawn"][1] <= timeline["worker_imports"][0] + 1e-3
        assert abs(seconds["worker_imports"] - (timeline["worker_imports"][1] - timeline["worker_imports"][0])) < 1e-3
        worker = pool.slots[0].worker
        assert worker.warm.wait(60), "no warm event after ready"
        assert worker.warm_info["warm_after_s"] >= info["ready_after_s"]
        assert set(worker.warm_info["startup_seconds"]).isdisjoint(seconds)  # only what came after ready
    finally:
        pool.close()


def test_the_rest_of_the_warm_children_start_after_ready_and_stop_with_the_pool():
    from kernelbench_rl.evaluation.worker.worker import Worker, WorkerConfig

    worker = Worker(WorkerConfig(device="cpu", warm_children=3))
    try:
        assert len(worker.children.warm) >= 1  # ready: one child to take at once
        taken = worker.take_child()  # while the others start: the pool still ends up full
        for thread in worker.background:
            thread.join(60)
        assert len(worker.children.warm) == 3 and taken not in worker.children.warm
        worker.children.retire(taken, "")
        assert all(child.process.is_alive() for child in worker.children.warm)
        assert "warm_children" in worker.phases.seconds()
        pids = [child.pid for child in worker.children.warm]
    finally:
        worker.shutdown()
    assert worker.children.closed and not worker.children.warm
    worker.children.fill_in_background().join(10)  # a fill after shutdown starts nothing
    assert not worker.children.warm
    for pid in pids:
        with pytest.raises(ProcessLookupError):
            os.kill(pid, 0)


def test_pre_started_children_start_their_runtime_in_turn(monkeypatch):
    """Paced to one at a time, each pre-start is spawned only once the one before it has started (its first message,
    which on a GPU comes after its CUDA context); a dead child no longer counts as starting."""
    from kernelbench_rl.evaluation.worker import children as children_module

    monkeypatch.setattr(children_module, "CONCURRENT_STARTS", 1)
    pool = children_module.ChildPool("cpu", warm_children=4, busy_cores=set())
    starting_at_each_spawn: list[int] = []
    spawn = pool._spawn

    def counted_spawn():
        starting_at_each_spawn.append(sum(child.starting() for child in pool.warm))
        return spawn()

    monkeypatch.setattr(pool, "_spawn", counted_spawn)
    try:
        pool.fill_in_background().join(60)
        assert len(pool.warm) == 4 and starting_at_each_spawn == [0, 0, 0, 0]
        child = pool.take()
        child.kill()
        assert not child.starting()
    finally:
        pool.shutdown()


def _settled(pool, timeout_s: float = 60.0) -> int:
    """The pre-started count once no fill is under way."""
    deadline = time.monotonic() + timeout_s
    while pool.filling and time.monotonic() < deadline:
        time.sleep(0.02)
    return len(pool.warm)


def test_the_pool_pre_starts_only_what_the_evaluations_in_hand_and_queued_can_take(monkeypatch):
    """Two children an evaluation (its candidate's, its reference's) and one spare: a folder of a few problems does not
    make the full count of contexts it never uses. Idle again, the pool fills up for the next batch."""
    from kernelbench_rl.evaluation.worker import children as children_module

    monkeypatch.setattr(children_module, "DEMAND_AWARE", True)
    monkeypatch.setattr(children_module, "IDLE_REFILL_S", 0.3)
    pool = children_module.ChildPool("cpu", warm_children=8, busy_cores=set())
    try:
        first = pool.job_arrived(backlog=1)  # one in hand, one queued behind it: 2 + 2 + 1
        assert pool.wanted() == 5 and _settled(pool) == 5
        second = pool.job_arrived(backlog=0)
        assert pool.wanted() == 5 and _settled(pool) == 5
        taken = [pool.take(first), pool.take(first), pool.take(second)]
        assert pool.wanted() == 2 and _settled(pool) == 2  # no replacement beyond what is still wanted
        taken.append(pool.take(first))  # a third take of one evaluation (a retry's) counts on nothing
        assert pool.wanted() == 2
        pool.job_left(first)
        pool.job_left(first)  # twice is once
        assert pool.jobs_in_hand == 1 and pool.wanted() == 2
        pool.job_left(second)
        assert pool.jobs_in_hand == 0 and pool.children_wanted == 0 and pool.wanted() == 8
        assert _settled(pool) < 8  # not at once: the next batch may be on its way
        deadline = time.monotonic() + 60
        while len(pool.warm) < 8 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _settled(pool) == 8
        for child in taken:
            pool.retire(child, "")
    finally:
        pool.shutdown()


def test_a_batch_whose_first_request_said_little_still_gets_its_children(monkeypatch):
    """The orchestrator's first send of a batch may find the rest not yet queued: the next requests' larger backlog
    starts a fill again."""
    from kernelbench_rl.evaluation.worker import children as children_module

    monkeypatch.setattr(children_module, "DEMAND_AWARE", True)
    pool = children_module.ChildPool("cpu", warm_children=6, busy_cores=set())
    try:
        pool.job_arrived(backlog=0)
        assert _settled(pool) == 3
        pool.job_arrived(backlog=4)
        assert pool.wanted() == 6 and _settled(pool) == 6
    finally:
        pool.shutdown()


@pytest.mark.parametrize("switch, backlog", [(False, 0), (True, None)])
def test_without_demand_or_its_switch_the_pool_keeps_all_its_children(monkeypatch, switch, backlog):
    from kernelbench_rl.evaluation.worker import children as children_module

    monkeypatch.setattr(children_module, "DEMAND_AWARE", switch)
    pool = children_module.ChildPool("cpu", warm_children=4, busy_cores=set())
    try:
        demand = pool.job_arrived(backlog=backlog)
        assert pool.wanted() == 4
        pool.fill_in_background().join(60)
        pool.retire(pool.take(demand), "")
        assert pool.wanted() == 4 and _settled(pool) == 4  # the take replaced its child
    finally:
        pool.shutdown()


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_a_pre_started_child_runs_on_the_compiling_cores_only():
    """Off the quiet cores from its spawn: a context's start there would deschedule a timing's thread."""
    from kernelbench_rl.evaluation.worker import children as children_module

    core = min(os.sched_getaffinity(0))
    pool = children_module.ChildPool("cpu", warm_children=2, busy_cores={core})
    try:
        pool.prestart(1)
        pool.fill_in_background().join(60)
        assert len(pool.warm) == 2
        assert all(os.sched_getaffinity(child.pid) == {core} for child in pool.warm)  # before any is taken
    finally:
        pool.shutdown()


# -- the private cache ------------------------------------------------------------------------


def _cache(tmp_path, **kwargs) -> private_cache.PrivateCache:
    return private_cache.PrivateCache(str(tmp_path / "cache"), **kwargs)


def test_a_cache_entry_is_read_back_only_for_exactly_its_key(tmp_path):
    cache = _cache(tmp_path)
    assert cache.usable, cache.refused
    assert os.stat(cache.directory).st_mode & 0o777 == 0o700
    assert cache.get("probe", KEY) is None
    assert cache.put("probe", KEY, {"answer": "ok"})
    assert cache.get("probe", KEY)["answer"] == "ok"
    assert cache.get("probe", dict(KEY, kernel="6.2")) is None
    assert cache.get("other", KEY) is None
    entry = os.path.join(cache.directory, "probe.json")
    assert os.stat(entry).st_mode & 0o777 == 0o600


@pytest.mark.parametrize("content", [b"", b"{", b"\xff\xfe", b"[1, 2]", b'{"key": {}, "value": {}}',
                                     b'{"key": null, "value": {"answer": "ok"}, "written": 1}'])
def test_a_corrupt_cache_entry_is_ignored_and_replaced(tmp_path, content):
    cache = _cache(tmp_path)
    path = os.path.join(cache.directory, "probe.json")
    with open(path, "wb") as handle:
        handle.write(content)
    assert cache.get("probe", KEY) is None
    assert cache.put("probe", KEY, {"answer": "ok"})
    assert cache.get("probe", KEY)["answer"] == "ok"


def test_a_stale_or_future_entry_is_ignored(tmp_path):
    cache = _cache(tmp_path, max_age_s=60)
    path = os.path.join(cache.directory, "probe.json")
    for written in (time.time() - 120, time.time() + 3600):
        with open(path, "w") as handle:
            json.dump({"key": KEY, "value": {"answer": "ok"}, "written": written}, handle)
        os.chmod(path, 0o600)
        assert cache.get("probe", KEY) is None


def test_an_entry_others_may_write_or_that_is_a_link_is_not_trusted(tmp_path):
    cache = _cache(tmp_path)
    assert cache.put("probe", KEY, {"answer": "ok"})
    path = os.path.join(cache.directory, "probe.json")
    os.chmod(path, 0o620)
    assert cache.get("probe", KEY) is None
    os.chmod(path, 0o600)
    outside = tmp_path / "planted.json"
    os.rename(path, outside)
    os.symlink(outside, path)
    assert cache.get("probe", KEY) is None


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a file to another user needs root")
def test_an_entry_or_directory_owned_by_another_user_is_not_trusted(tmp_path):
    cache = _cache(tmp_path)
    assert cache.put("probe", KEY, {"answer": "ok"})
    path = os.path.join(cache.directory, "probe.json")
    os.chown(path, 65534, 65534)
    assert cache.get("probe", KEY) is None
    os.chown(path, 0, 0)
    assert cache.get("probe", KEY) is not None
    os.chown(cache.directory, 65534, 65534)
    again = private_cache.PrivateCache(cache.directory)
    assert not again.usable and "belongs to uid 65534" in again.refused
    assert again.get("probe", KEY) is None and not again.put("probe", KEY, {"answer": "ok"})


def test_a_directory_open_to_others_or_not_a_directory_is_not_used(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    cache = private_cache.PrivateCache(str(loose))
    assert not cache.usable and "open to others" in cache.refused
    assert not cache.put("probe", KEY, {"answer": "ok"}) and cache.get("probe", KEY) is None
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    link = tmp_path / "link"
    os.symlink(private, link)
    assert not private_cache.PrivateCache(str(link)).usable
    plain = tmp_path / "file"
    plain.write_text("x")
    assert not private_cache.PrivateCache(str(plain)).usable


def test_a_passing_probe_is_remembered_for_exactly_this_machine_and_software(tmp_path, monkeypatch):
    cache = _cache(tmp_path)
    assert same_uid.remembered_pass(True, cache) == ""
    assert same_uid.remember_pass(True, 3.2, cache)
    assert same_uid.remembered_pass(True, cache) != ""
    assert same_uid.remembered_pass(False, cache) == ""  # another confinement: probe again
    monkeypatch.setattr(same_uid, "_PROBED_SOURCES", same_uid._PROBED_SOURCES + ("checks.py",))
    assert same_uid.remembered_pass(True, cache) == ""  # other sandbox sources: probe again
    monkeypatch.undo()
    monkeypatch.setenv("KBRL_EVAL_PROBE_CACHE", "off")
    assert same_uid.remembered_pass(True, cache) == ""
    monkeypatch.delenv("KBRL_EVAL_PROBE_CACHE")
    key = same_uid.probe_cache_key(True)
    cache.put(same_uid.PROBE_CACHE_ENTRY, key, {"answer": "probe child: no"})  # only a pass counts
    assert same_uid.remembered_pass(True, cache) == ""


def test_no_probe_and_no_switch_where_same_uid_mode_does_not_apply(monkeypatch):
    phases = startup.Phases()
    assert same_uid.settle("cpu", "auto", True, True, phases, may_probe=True) == (True, False, "")
    assert same_uid.settle("cuda", "file", True, True, phases, may_probe=True) == (True, False, "")
    monkeypatch.setenv("KBRL_EVAL_SAME_UID", "0")
    assert same_uid.settle("cuda", "auto", True, True, phases, may_probe=False) == (
        True, False, "disabled by KBRL_EVAL_SAME_UID")
    assert os.geteuid() == os.getuid()  # nothing switched


def test_counting_gpus_for_the_pool_imports_no_torch():
    import subprocess
    import sys

    code = ("import os, sys\nos.environ.pop('CUDA_VISIBLE_DEVICES', None)\n"
            "from kernelbench_rl.evaluation.front import pool\n"
            "count = pool._default_worker_count('cuda')\n"
            "print(count, 'torch' in sys.modules)")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    count, imported = proc.stdout.split()
    assert int(count) >= 1 and imported == "False"


def test_reading_the_cache_leaves_the_processs_temporary_folder_unchosen(tmp_path, monkeypatch):
    """A root worker reads the cache before it becomes unprivileged: had that fixed tempfile's folder for the
    process, the unprivileged worker would go on making its folders where only root may write."""
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    cache = private_cache.PrivateCache()
    assert cache.directory == str(tmp_path / f"kbrl-cache-{os.geteuid()}") and cache.usable
    cache.put("probe", KEY, {"answer": "ok"})
    assert cache.get("probe", KEY) is not None
    assert tempfile.tempdir is None


def test_the_probe_runs_in_a_process_of_its_own_and_answers_one_line():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "kernelbench_rl.evaluation.worker.same_uid", "--probe", "--parent",
                           str(os.getpid())], capture_output=True, text=True, timeout=same_uid.SAME_UID_PROBE_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0]
    import torch

    if not torch.cuda.is_available():
        assert lines[0] != "ok"  # a probe needs a GPU to pass
    usage = subprocess.run([sys.executable, "-m", "kernelbench_rl.evaluation.worker.same_uid"], capture_output=True,
                           text=True, timeout=60)
    assert usage.returncode == 2 and "--probe" in usage.stderr


def _no_switch(monkeypatch):
    switched, remembered = [], []
    monkeypatch.setattr(same_uid, "become_same_uid_worker", lambda: switched.append(True))
    monkeypatch.setattr(same_uid, "remember_pass", lambda *args, **kwargs: remembered.append(args) or True)
    monkeypatch.setattr(same_uid, "same_uid_possible", lambda *args: "")
    return switched, remembered


def test_the_worker_takes_the_answer_of_the_probe_started_beside_its_imports(monkeypatch):
    switched, remembered = _no_switch(monkeypatch)
    monkeypatch.setattr(same_uid, "remembered_pass", lambda *args: "")
    forked = []
    monkeypatch.setattr(same_uid, "_forked_probe", lambda landlock: forked.append(landlock) or "no (forked)")
    phases = startup.Phases()
    pending = same_uid.PendingProbe(True)
    decided, same, note = same_uid.settle("cuda", "auto", True, True, phases, may_probe=True, pending=pending)
    assert decided and pending.process.poll() is not None
    assert phases.seconds()["same_uid_probe"] > 0
    if same:  # a machine where the probe passes: remembered, then switched, with no second probe
        assert note.startswith("ok (") and switched and remembered and not forked
    else:  # it failed here, and so did the forked probe asked once more
        assert forked == [True] and note.endswith(" s)") and "; forked: no (forked)" in note
        assert not switched and not remembered


def test_a_failure_of_the_separate_probe_is_asked_again_in_a_fork(monkeypatch):
    switched, remembered = _no_switch(monkeypatch)
    monkeypatch.setattr(same_uid, "remembered_pass", lambda *args: "")
    monkeypatch.setattr(same_uid, "_forked_probe", lambda landlock: "ok")
    pending = same_uid.PendingProbe(True)
    pending.cancel()  # killed: its answer is a failure, whatever this machine is
    decided, same, note = same_uid.settle("cuda", "auto", True, True, startup.Phases(), may_probe=True, pending=pending)
    assert (decided, same) == (True, True) and note.startswith("ok (") and switched and remembered


def test_a_remembered_pass_stops_the_probe_under_way(monkeypatch):
    switched, _ = _no_switch(monkeypatch)
    monkeypatch.setattr(same_uid, "remembered_pass", lambda *args: "2026-11-25 21:54:31")
    pending = same_uid.PendingProbe(True)
    assert same_uid.settle("cuda", "auto", True, True, startup.Phases(), may_probe=True, pending=pending) == (
        True, True, "ok (remembered from 2026-11-25 21:54:31)")
    assert pending.process.poll() is not None and switched
    pending = same_uid.PendingProbe(True)
    assert same_uid.settle("cpu", "auto", True, True, startup.Phases(), may_probe=True, pending=pending)[1] is False
    assert pending.process.poll() is not None


_BACKLOG_SCRIPT = """
import dataclasses, json
from kernelbench_rl.evaluation.sandbox import numerics
from kernelbench_rl.evaluation.worker import worker_process
from kernelbench_rl.evaluation.result import EvalSettings
from kernelbench_rl.evaluation.worker.worker import Worker, WorkerConfig
from kernelbench_rl.problems import get_problem

numerics.apply()  # as the worker's process does (worker_process.main)
problem = get_problem("L1/19")
settings = EvalSettings(device="cpu", timeout_s=60, size="small")
identity = problem.source_for("small").replace("class Model(", "class ModelNew(")
payload = {"problem_id": "L1/19", "candidate_source": identity, "candidate_sha256": "a" * 64,
           "settings": dataclasses.asdict(settings), "problem_source": problem.source_for("small"),
           "suite": problem.suite, "baseline": None, "input_variant": None}
worker = Worker(WorkerConfig(device="cpu", warm_children=2))
answers, backlogs = [], []
try:
    for line in ({"id": 1, "request": payload, "backlog": 5}, {"id": 2, "request": {"broken": True}, "backlog": 3},
                 {"id": 3, "request": payload}):
        worker_process._handle(worker, json.dumps(line), answers.append)
        backlogs.append(worker.children.backlog)
    print(json.dumps({"backlogs": backlogs, "in_hand": worker.children.jobs_in_hand,
                      "wanted": worker.children.children_wanted,
                      "answers": {m["id"]: ("error" if "error" in m else m["result"]["correct"])
                                  for m in answers if "event" not in m}}))
finally:
    worker.shutdown()
"""


def test_a_request_s_backlog_reaches_the_pool_and_its_evaluation_leaves_no_demand_behind():
    """What the orchestrator's line says is queued behind a request is what the worker's pool plans for; an evaluation,
    however it ends, takes its share of the demand with it."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _BACKLOG_SCRIPT], capture_output=True, text=True, timeout=300,
                          cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["backlogs"] == [5, 3, None]  # the last orchestrator does not say
    assert report["in_hand"] == 0 and report["wanted"] == 0
    assert report["answers"] == {"1": True, "2": "error", "3": True}
