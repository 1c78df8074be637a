"""bench/node_summary.py: a whole node's identity and scaling figures against the bars, per GPU (synthetic runs in the
shapes bench/kernelbench_sweep.py and bench/eval_scaling.py write)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "bench"))


def _load(name: str, file: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "bench" / file)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


sweep = _load("kernelbench_sweep_summary", "kernelbench_sweep.py")
node = _load("node_summary", "node_summary.py")


def identity_run(speedups: dict[str, tuple[float, str]]) -> dict:
    records = [{"label": f"{pid}/identity", "problem_id": pid, "level": int(pid[1]), "name": pid, "category": "ok",
                "correct": True, "message": "", "speedup": s, "runtime_ms": 1.0, "baseline_ms": s, "flags": [],
                "floor_s": 0.1, "latency_overhead_s": None, "latency_overhead_unqueued_s": None,
                "versions": {"gpu": card, "baseline_gpu": card}} for pid, (s, card) in speedups.items()]
    group = {"wall_s": 60.0, "budget_cut": False, "not_finished": []}
    return {"summary": sweep.summarise_sweep(records, group, len(records), []), "per_candidate": records}


def test_a_node_is_judged_per_card_against_the_band_and_compared_with_gpu0_alone(tmp_path):
    all_gpus = identity_run({"L1/1": (1.0, "0 GPU-a"), "L1/2": (1.01, "1 GPU-b"), "L2/3": (1.4, "1 GPU-b")})
    alone = identity_run({"L1/1": (1.0, "0 GPU-a"), "L1/2": (0.99, "0 GPU-a"), "L2/3": (1.02, "0 GPU-a")})
    scaling = {"runs": {"plain": {"1": {"per_minute": 30.0, "candidates": 15, "per_gpu": {}},
                                  "2": {"per_minute": 58.0, "candidates": 29, "per_gpu": {}},
                                  "4": {"per_minute": 90.0, "candidates": 45, "per_gpu": {}}}},
               "ratios": {"plain": {"2": 1.933, "4": 3.0}},
               "where_the_time_goes": {"plain": {"4": {"readings": ["the host's CPU is saturated"]}}}}
    paths = {}
    for name, data in (("all", all_gpus), ("one", alone), ("scaling", scaling)):
        paths[name] = tmp_path / f"{name}.json"
        paths[name].write_text(json.dumps(data))
    out = tmp_path / "node.json"
    assert node.main(["--identity-all", str(paths["all"]), "--identity-one", str(paths["one"]),
                      "--scaling", str(paths["scaling"]), "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    everywhere, gpu0 = report["identity_all_gpus"], report["identity_gpu0"]
    assert not everywhere["meets_bar"] and everywhere["outside"] == ["L2/3/identity"]
    assert everywhere["per_gpu"]["1 GPU-b"]["outside"] == ["L2/3/identity"]
    assert everywhere["per_gpu"]["0 GPU-a"]["outside"] == []
    assert gpu0["meets_bar"]
    assert report["outside_the_band_in_either"] == [
        {"label": "L2/3/identity", "all_gpus": 1.4, "gpu": "1 GPU-b", "gpu0_alone": 1.02}]
    plain = report["scaling"]["plain"]
    assert plain["2"]["meets_bar"] is True and plain["4"]["meets_bar"] is False and plain["1"]["meets_bar"] is None
    assert plain["4"]["readings"] == ["the host's CPU is saturated"]


def test_a_part_not_run_is_said_so(capsys):
    assert node.main([]) == 0
    printed = capsys.readouterr().out
    assert "identity, pool on all GPUs: not run" in printed and "scaling: not run" in printed
