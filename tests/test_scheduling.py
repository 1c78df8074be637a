"""The worker's process-wide scheduling settings."""


def test_the_workers_gil_switch_interval_is_set_from_its_variable_and_bad_values_change_nothing():
    import sys

    from kernelbench_rl.evaluation import scheduling

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
