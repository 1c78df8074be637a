"""bench/kernelbench_sweep.py's parts that a whole GPU node's run needs: one random draw of problems that a second
run repeats, and identity's band per card with any baseline timed on another card named."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def _load_script():
    spec = importlib.util.spec_from_file_location("kernelbench_sweep_node", REPO / "bench" / "kernelbench_sweep.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sweep = _load_script()


@pytest.fixture(scope="module")
def kb_root() -> Path:
    root = REPO.parent / "shared" / "kernelbench"
    if not (root / "KernelBench" / "level1").is_dir():
        pytest.skip(f"no KernelBench snapshot at {root}")
    return root


def drawn(root: Path, *flags: str) -> list[str]:
    args = sweep.build_parser().parse_args(["identity", "--kernelbench-root", str(root), *flags])
    chosen, _ = sweep.select_problems(args, sweep.resolve_root(str(root)))
    return [p.id for p in chosen]


def test_the_same_seed_draws_the_same_problems_across_levels(kb_root):
    first = drawn(kb_root, "--levels", "1,2,3", "--sample", "50", "--seed", "7")
    assert first == drawn(kb_root, "--levels", "1,2,3", "--sample", "50", "--seed", "7")
    assert len(set(first)) == 50 and {i.split("/")[0] for i in first} == {"L1", "L2", "L3"}
    assert first != drawn(kb_root, "--levels", "1,2,3", "--sample", "50", "--seed", "8")


def record(label: str, speedup: float, gpu: str, baseline_gpu: str) -> dict:
    return {"label": label, "correct": True, "speedup": speedup, "runtime_ms": 1.0, "baseline_ms": speedup,
            "versions": {"gpu": gpu, "baseline_gpu": baseline_gpu}}


def test_identity_is_reported_per_card_with_baselines_from_another_card_named():
    records = [record("L1/1/identity", 1.0, "0 GPU-a", "0 GPU-a"), record("L1/2/identity", 1.3, "0 GPU-a", "0 GPU-a"),
               record("L2/1/identity", 0.99, "1 GPU-b", "0 GPU-a")]
    cards = sweep.speedup_by_gpu(records)
    assert cards["0 GPU-a"]["share_within_0.95_1.05"] == 0.5
    assert [r["label"] for r in cards["0 GPU-a"]["outside_0.8_1.25"]] == ["L1/2/identity"]
    assert cards["0 GPU-a"]["baseline_elsewhere"] == []
    assert cards["1 GPU-b"]["baseline_elsewhere"] == ["L2/1/identity"]
