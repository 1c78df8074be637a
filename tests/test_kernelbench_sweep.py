"""bench/kernelbench_sweep.py on the CPU at small sizes: identity verdicts, bad input, the rename, the harness figures.

The script runs in a subprocess (as on the GPU machine) on a few small level-1 problems of the KernelBench
snapshot (KERNELBENCH_ROOT, else ../shared/kernelbench beside the repository). The CPU run claims no
speedups, so these tests check the JSON's shape and counts, never a speed.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPT = REPO / "bench" / "kernelbench_sweep.py"


def _load_script():
    spec = importlib.util.spec_from_file_location("kernelbench_sweep", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


sweep = _load_script()


@pytest.fixture(scope="module")
def kb_root() -> Path:
    root = Path(os.environ.get("KERNELBENCH_ROOT") or REPO.parent / "shared" / "kernelbench")
    if not (root / "KernelBench" / "level1").is_dir() and not (root / "level1").is_dir():
        pytest.skip(f"no KernelBench snapshot at {root} (set KERNELBENCH_ROOT)")
    return root


def run_script(*args: str, timeout: float = 240) -> subprocess.CompletedProcess:
    env = dict(os.environ)
    env.pop("KERNELBENCH_ROOT", None)  # every call names its root, or means to have none
    env["TRITON_INTERPRET"] = "1"
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=timeout,
                          cwd=REPO, env=env)


# ---------------------------------------------------------------- the rename


TRICKY = '''import torch
import torch.nn as nn

# Model is the reference; ModelHelper is not.
class ModelHelper(nn.Module):
    def forward(self, x):
        return x


class Model(nn.Module):
    """A Model that doubles (Model in a docstring stays)."""

    def __init__(self, scale: float = 2.0):
        super(Model, self).__init__()
        self.helper = ModelHelper()
        self.scale = scale
        self.name = "Model"

    def forward(self, x):  # Model.forward
        assert isinstance(self, Model)
        return self.helper(x) * self.scale

    @classmethod
    def make(cls) -> "Model":
        return Model()


def get_inputs():
    return [torch.rand(4, 4)]


def get_init_inputs():
    return [2.0]
'''


def test_rename_model_class_renames_code_and_leaves_the_rest():
    renamed = sweep.rename_model_class(TRICKY)
    assert "class ModelNew(nn.Module):" in renamed
    assert "super(ModelNew, self).__init__()" in renamed
    assert "isinstance(self, ModelNew)" in renamed
    assert "return ModelNew()" in renamed
    # a helper whose name contains Model, strings, comments and docstrings are left alone
    assert "class ModelHelper(nn.Module):" in renamed and "self.helper = ModelHelper()" in renamed
    assert "# Model is the reference; ModelHelper is not." in renamed
    assert '"""A Model that doubles (Model in a docstring stays)."""' in renamed
    assert 'self.name = "Model"' in renamed and '-> "Model"' in renamed
    assert "# Model.forward" in renamed
    assert "def get_inputs():" in renamed and "def get_init_inputs():" in renamed
    tree = ast.parse(renamed)
    assert not [n for n in ast.walk(tree) if isinstance(n, ast.Name) and n.id == "Model"]
    assert [n.name for n in tree.body if isinstance(n, ast.ClassDef)] == ["ModelHelper", "ModelNew"]
    # only the renamed names changed: same number of lines, and the module still runs
    assert len(renamed.splitlines()) == len(TRICKY.splitlines())
    namespace: dict = {}
    exec(compile(renamed, "<renamed>", "exec"), namespace)
    model = namespace["ModelNew"](*namespace["get_init_inputs"]())
    x = namespace["get_inputs"]()[0]
    assert (model(x) == x * 2).all()


def test_rename_model_class_keeps_attributes_and_refuses_sources_without_model():
    source = "import m\nclass Model:\n    kind = m.Model\n    other = Model\n"
    renamed = sweep.rename_model_class(source)
    assert "kind = m.Model" in renamed and "class ModelNew:" in renamed
    # `other = Model` inside the class body refers to the class's global name: renamed
    assert "other = ModelNew" in renamed
    with pytest.raises(ValueError):
        sweep.rename_model_class("class Net:\n    pass\n")
    with pytest.raises(ValueError):
        sweep.rename_model_class("class Model:\n    pass\nclass ModelNew:\n    pass\n")


def test_every_kernelbench_problem_renames(kb_root):
    root = sweep.resolve_root(str(kb_root))
    problems = sweep.load_root_problems(root, [1, 2, 3])
    assert len(problems) >= 200
    for problem in problems.values():
        renamed = sweep.rename_model_class(problem.source)
        assert "class ModelNew(" in renamed, problem.id


def test_speedup_distribution():
    records = [{"label": f"L1/{i}/identity", "correct": True, "speedup": s, "runtime_ms": 1.0, "baseline_ms": s}
               for i, s in enumerate([0.5, 0.97, 1.0, 1.01, 1.02, 1.3])]
    dist = sweep.speedup_distribution(records)
    assert dist["count"] == 6 and dist["median"] == pytest.approx(1.005)
    assert dist["share_within_0.95_1.05"] == pytest.approx(4 / 6, abs=1e-3)
    assert [r["label"] for r in dist["outside_0.8_1.25"]] == ["L1/0/identity", "L1/5/identity"]


# ---------------------------------------------------------------- the script, in a subprocess


def test_identity_on_cpu_judges_the_references_correct(kb_root, tmp_path):
    out = tmp_path / "identity.json"
    proc = run_script("identity", "--kernelbench-root", str(kb_root), "--device", "cpu", "--size", "small",
                      "--problems", "L1/19,L1/23", "--correctness-trials", "2", "--timeout", "90", "--out", str(out))
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "== identity: 2 of 2 finished, 2 correct" in proc.stdout
    assert proc.stdout.count("ours  [") == 2  # one progress line per candidate
    data = json.loads(out.read_text())
    assert data["mode"] == "identity" and data["planned"] == 2
    assert data["ours"]["static_checks"] is False
    assert data["ours"]["settings"]["size"] == "small" and data["ours"]["settings"]["device"] == "cpu"
    summary = data["summary"]
    assert summary["finished"] == 2 and summary["correct"] == 2 and not summary["budget_cut"]
    assert summary["verdicts_by_level"] == {"L1": {"ok": 2}}
    assert summary["not_correct"] == []
    assert summary["speedup"]["count"] == 0  # the CPU claims no speedups
    assert summary["wall_s"] > 0 and summary["candidates_per_min"] > 0
    records = sorted(data["per_candidate"], key=lambda r: r["label"])
    assert [r["label"] for r in records] == ["L1/19/identity", "L1/23/identity"]
    for r in records:
        assert r["correct"] and r["category"] == "ok" and r["speedup"] is None
        # L1/19 (ReLU on torch.rand: the identity on its own inputs) also runs the widened seeds; both run the two
        # sensitivity seeds (a perturbation and a second batch size)
        assert r["trials_passed"] == r["trials_total"] == (4 if r["label"].startswith("L1/19/") else 2) + 2
        assert "worker_total" in r["phase_seconds"] and r["floor_s"] >= 0


@pytest.mark.parametrize("args, words", [
    (["identity", "--kernelbench-root", "/nonexistent/kernelbench"], "does not exist"),
    (["identity", "--problems", "L1/999"], "No problem L1/999"),
    (["identity", "--problems", "L1-19"], "not a problem id"),
    (["identity", "--levels", "4"], "Level 4 is not supported"),
    (["kb-harness", "--device", "cpu"], "needs a CUDA GPU"),
])
def test_bad_input_exits_2_with_one_sentence(kb_root, args, words):
    if "--kernelbench-root" not in args:
        args = [*args, "--kernelbench-root", str(kb_root)]
    proc = run_script(*args, "--device", "cpu", timeout=60) if "--device" not in args else run_script(*args, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ") and words in lines[0], proc.stderr


def test_no_root_exits_2():
    proc = run_script("identity", "--device", "cpu", timeout=60)
    assert proc.returncode == 2 and "No KernelBench root" in proc.stderr and "Traceback" not in proc.stderr


def test_kb_harness_imports_kernelbench_eval_with_stand_ins(kb_root):
    if importlib.util.find_spec("pydantic") is None:
        pytest.skip("pydantic is not installed here (KernelBench's eval.py needs it)")
    proc = run_script("kb-harness", "--kernelbench-root", str(kb_root), "--device", "cpu", "--check-imports", timeout=120)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert "KernelBench's eval.py imports" in proc.stdout


@pytest.mark.parametrize("exact", [False, True])
def test_kb_child_numerics_default_or_exact_fp32(kb_root, tmp_path, exact):
    """--kb-exact-fp32 turns TF32 off in KernelBench's process (its reference and candidate share it); by default
    its process keeps torch's defaults, cuDNN's TF32 on, as its own scripts run."""
    if importlib.util.find_spec("pydantic") is None:
        pytest.skip("pydantic is not installed here (KernelBench's eval.py needs it)")
    spec = tmp_path / "spec.json"
    spec.write_text(json.dumps({"import_only": True, "exact_fp32": exact}))
    found, _wall, tail, _timed_out = sweep.kb_child_run(spec, sweep.kb_source_dir(kb_root), argparse.Namespace(kb_site=None),
                                                        str(tmp_path), 120.0)
    assert found is not None and not found["error"], tail
    assert found["numerics"]["cudnn_allow_tf32"] is (not exact)
    assert found["numerics"]["cuda_matmul_allow_tf32"] is False


def test_harness_summary_per_level_from_records(capsys):
    """The kb-harness figures from synthetic records (the mode itself needs a GPU)."""
    def kb(label, level, correct, runtime, wall, error=""):
        return {"label": label, "problem_id": label.rsplit("/", 1)[0], "level": level, "name": "x", "compiled": True,
                "correctness": correct, "runtime_ms": runtime, "ref_runtime_ms": runtime, "kb_speedup": 1.0,
                "error": error, "timed_out": False, "wall_s": wall, "phase_seconds": {}}

    def ours(label, level, correct, runtime, category="ok"):
        return {"label": label, "problem_id": label.rsplit("/", 1)[0], "level": level, "name": "x", "kind": "identity",
                "category": category, "correct": correct, "message": "" if correct else "values differ",
                "runtime_ms": runtime, "speedup": 1.0 if correct else None, "flags": [], "floor_s": 1.0,
                "latency_overhead_s": 0.5, "latency_overhead_unqueued_s": 0.4, "phase_seconds": {}}

    kb_records = [kb("L1/19/identity", 1, True, 2.0, 10.0), kb("L1/23/identity", 1, True, 1.0, 20.0),
                  kb("L2/1/identity", 2, False, None, 15.0, "correctness_issue: Output mismatch"),
                  kb("L2/9/identity", 2, True, 4.0, 15.0)]
    ours_records = [{**ours("L1/19/identity", 1, True, 2.2), "baseline_gpu_s": 0.5}, ours("L1/23/identity", 1, True, 1.0),
                    ours("L2/1/identity", 2, True, 3.0), ours("L2/9/identity", 2, False, None, "mismatch")]
    groups = [{"name": "L1", "wall_s": 3.0}, {"name": "L2", "wall_s": 6.0}]
    summary = sweep.summarise_harness(kb_records, ours_records, groups)
    l1, l2, total = (summary["per_level"][k] for k in ("L1", "L2", "all"))
    assert l1["kb"]["per_min"] == pytest.approx(4.0) and l1["ours"]["per_min"] == pytest.approx(40.0)
    assert l1["throughput_ratio_ours_over_kb"] == pytest.approx(10.0)
    assert l1["agreement"]["both_correct"] == 2 and l1["runtime_ratio_ours_over_kb"]["median"] == pytest.approx(1.05)
    assert l1["ours"]["overhead_per_candidate_s"] == pytest.approx(0.5)  # 3 s / 2 - floor 1 s
    # no overhead at all: 30 s of KernelBench over 1 + 0.5 + 1 s of GPU (one baseline timed cold)
    assert l1["floor_with_baselines_s"] == pytest.approx(2.5) and l1["ratio_ceiling"] == pytest.approx(12.0)
    assert [d["label"] for d in l2["agreement"]["disagree"]] == ["L2/1/identity", "L2/9/identity"]
    assert total["kb"]["candidates"] == 4 and total["ours"]["wall_s"] == pytest.approx(9.0)
    data = {"candidates": "identity", "kb": {"budget_cut": False}, "ours": {"pool_startup_s": 12.0},
            "summary": summary, "floor_definition": "floor"}
    sweep.print_harness(data)
    printed = capsys.readouterr().out
    assert "disagree L2/1/identity" in printed and "L1" in printed
