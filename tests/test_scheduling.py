"""The worker's process-wide scheduling settings."""


def test_the_workers_gil_switch_interval_is_set_from_its_variable_and_bad_values_keep_the_default():
    import sys

    from kernelbench_rl.evaluation import scheduling

    before = sys.getswitchinterval()
    try:
        assert scheduling.apply_switch_interval("2") == "2 ms"
        assert abs(sys.getswitchinterval() - 0.002) < 1e-9
        assert scheduling.apply_switch_interval("") == f"{scheduling.SWITCH_INTERVAL_MS:g} ms"
        assert abs(sys.getswitchinterval() - scheduling.SWITCH_INTERVAL_MS / 1e3) < 1e-9
        note = scheduling.apply_switch_interval("fast")
        assert note.startswith(f"{scheduling.SWITCH_INTERVAL_MS:g} ms") and "'fast' is not a number" in note
        assert "Python's" in scheduling.apply_switch_interval("default")
        assert scheduling.apply_switch_interval("-1").startswith(f"{scheduling.SWITCH_INTERVAL_MS:g} ms (")
    finally:
        sys.setswitchinterval(before)
