"""bench/child_speed_probe.py: its conditions leave out exactly one part each, and without a GPU it says so."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))

import child_speed_probe as probe  # noqa: E402


def test_each_real_no_condition_drops_exactly_the_part_it_names():
    full = set(probe.PARTS)
    assert probe.CONDITIONS["real"] == full
    assert probe.CONDITIONS["bare"] == set()
    for name, parts in probe.CONDITIONS.items():
        if name.startswith("real-no-") and name != "real-no-confine":
            assert full - parts == {name.removeprefix("real-no-")}, name
    # Without the confinement there is no Landlock or seccomp to leave in.
    assert not probe.CONDITIONS["real-no-confine"] & {"confine", "landlock", "seccomp"}


def test_the_reference_loads_from_a_kernelbench_checkout_without_its_model_renamed(tmp_path):
    root = REPO.parent / "shared" / "kernelbench"
    if not root.is_dir():
        pytest.skip("no KernelBench snapshot beside the repository")
    module = probe._load(str(root), "L1/19")
    assert isinstance(module.Model, type) and callable(module.get_inputs)


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="checks the CPU-only message")
def test_without_cuda_it_exits_with_one_sentence():
    out = subprocess.run([sys.executable, str(REPO / "bench" / "child_speed_probe.py"), "--kernelbench-root", "x"],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert out.stderr.strip() == "child_speed_probe needs a CUDA GPU."
