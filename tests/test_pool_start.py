"""The evaluation pool's start: the ready event says where the seconds went, the zygote starts before the
worker's imports, the rest of the warm children come after ready, and the private cache that remembers a
passing same-uid probe trusts only what this user wrote for exactly this machine."""

from __future__ import annotations

import json
import os
import time

import pytest

from kernelbench_rl.evaluation import same_uid, startup
from kernelbench_rl.evaluation.pool import WorkerPool

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
    from kernelbench_rl.evaluation.worker import Worker, WorkerConfig

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
    from kernelbench_rl.evaluation import children as children_module

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


@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no CPU affinity here")
def test_a_pre_started_child_runs_on_the_compiling_cores_only():
    """Off the quiet cores from its spawn: a context's start there would deschedule a timing's thread."""
    from kernelbench_rl.evaluation import children as children_module

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


def _cache(tmp_path, **kwargs) -> startup.PrivateCache:
    return startup.PrivateCache(str(tmp_path / "cache"), **kwargs)


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
    again = startup.PrivateCache(cache.directory)
    assert not again.usable and "belongs to uid 65534" in again.refused
    assert again.get("probe", KEY) is None and not again.put("probe", KEY, {"answer": "ok"})


def test_a_directory_open_to_others_or_not_a_directory_is_not_used(tmp_path):
    loose = tmp_path / "loose"
    loose.mkdir(mode=0o755)
    os.chmod(loose, 0o755)
    cache = startup.PrivateCache(str(loose))
    assert not cache.usable and "open to others" in cache.refused
    assert not cache.put("probe", KEY, {"answer": "ok"}) and cache.get("probe", KEY) is None
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    link = tmp_path / "link"
    os.symlink(private, link)
    assert not startup.PrivateCache(str(link)).usable
    plain = tmp_path / "file"
    plain.write_text("x")
    assert not startup.PrivateCache(str(plain)).usable


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
            "from kernelbench_rl.evaluation import pool\n"
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
    cache = startup.PrivateCache()
    assert cache.directory == str(tmp_path / f"kbrl-cache-{os.geteuid()}") and cache.usable
    cache.put("probe", KEY, {"answer": "ok"})
    assert cache.get("probe", KEY) is not None
    assert tempfile.tempdir is None


def test_the_probe_runs_in_a_process_of_its_own_and_answers_one_line():
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "kernelbench_rl.evaluation.same_uid", "--probe", "--parent",
                           str(os.getpid())], capture_output=True, text=True, timeout=same_uid.SAME_UID_PROBE_TIMEOUT_S)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.strip().splitlines()
    assert len(lines) == 1 and lines[0]
    import torch

    if not torch.cuda.is_available():
        assert lines[0] != "ok"  # a probe needs a GPU to pass
    usage = subprocess.run([sys.executable, "-m", "kernelbench_rl.evaluation.same_uid"], capture_output=True,
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
