"""The worker's process-wide scheduling settings."""


def test_the_workers_gil_switch_interval_is_set_from_its_variable_and_bad_values_change_nothing():
    import sys

    from kernelbench_rl.evaluation.worker import scheduling

    before = sys.getswitchinterval()
    try:
        sys.setswitchinterval(0.005)
        assert scheduling.apply_switch_interval("") == "5 ms (Python's)"
        assert scheduling.apply_switch_interval("2") == "2 ms"
        assert abs(sys.getswitchinterval() - 0.002) < 1e-9
        assert scheduling.apply_switch_interval("default") == "2 ms (Python's)"  # left as it is
        note = scheduling.apply_switch_interval("fast")
        assert note.startswith("2 ms (Python's") and "'fast' is not a number" in note
        assert "is not a number" in scheduling.apply_switch_interval("-1")
        assert abs(sys.getswitchinterval() - 0.002) < 1e-9
    finally:
        sys.setswitchinterval(before)


def test_the_budget_says_when_a_sizing_is_next_in_line_and_forgets_a_request_that_gave_up():
    import threading
    import time

    from kernelbench_rl.evaluation.worker import scheduling

    budget = scheduling.MemoryBudget(100)
    order = []

    def request(name, **kwargs):
        with budget.hold(100, **kwargs):
            order.append(name)

    def queued(count):
        deadline = time.monotonic() + 5
        while len(budget._queue) < count and time.monotonic() < deadline:
            time.sleep(0.005)

    assert not budget.next_is_sizing()
    with budget.hold(100, sizing=True):  # a sizing holds the budget
        warm = threading.Thread(target=request, args=("warm",))
        warm.start()
        queued(1)
        assert not budget.next_is_sizing()  # a child's warm-up is next: the holder must give its cache back
        sizing = threading.Thread(target=request, args=("sizing",), kwargs={"sizing": True})
        sizing.start()
        queued(2)
        assert not budget.next_is_sizing()  # still the warm-up first (first come, first served)
    warm.join(5)
    sizing.join(5)
    assert order == ["warm", "sizing"] and not budget.next_is_sizing()

    with budget.hold(100):
        sizing = threading.Thread(target=request, args=("second sizing",), kwargs={"sizing": True})
        sizing.start()
        queued(1)
        assert budget.next_is_sizing()  # nobody can allocate before it
    sizing.join(5)
    assert not budget.next_is_sizing()

    class GaveUp(Exception):
        pass

    def interrupted_wait(*_a, **_k):
        raise GaveUp

    with budget.hold(100):
        budget._cond.wait = interrupted_wait  # the waiter's wait ends in an exception
        try:
            budget.hold(100, sizing=True).__enter__()
        except GaveUp:
            pass
        del budget._cond.wait
        assert not budget._queue and not budget.next_is_sizing()  # nobody queues behind a request that left


def test_a_wait_for_free_memory_gives_back_this_process_s_own_cache_instead_of_sitting_out_its_bound(monkeypatch):
    """The device (a stand-in: there is no GPU here) is short only by what this process caches: the wait releases
    that after its grace, not after FREE_WAIT_S; a wait that children's memory ends never releases it."""
    import torch

    from kernelbench_rl.evaluation.worker import scheduling
    from kernelbench_rl.evaluation.result import EvalResult

    gib = 2**30
    device = {"free": 10 * gib, "cached": 30 * gib, "released": 0}

    def empty_cache():
        device["free"] += device["cached"]
        device["cached"] = 0
        device["released"] += 1

    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (device["free"], 80 * gib))
    monkeypatch.setattr(torch.cuda, "empty_cache", empty_cache)
    monkeypatch.setattr(scheduling, "OWN_CACHE_GRACE_S", 0.1)
    monkeypatch.setattr(scheduling, "FREE_WAIT_S", 20.0)
    result = EvalResult(problem_id="L1/1", candidate_sha256="", backend="triton", precision="fp32", device_kind="cuda")
    scheduling.wait_for_free(30 * gib, result, lambda: "")
    assert device["released"] == 1 and result.phase_seconds["free_wait"] < scheduling.FREE_WAIT_S
    assert result.versions["free_wait_released_gb"] == "30.0" and result.versions["device_free_gb"].startswith("40.0")

    device.update(free=40 * gib, cached=5 * gib, released=0)  # free enough already: nothing to give back
    scheduling.wait_for_free(30 * gib, result, lambda: "")
    assert device["released"] == 0
