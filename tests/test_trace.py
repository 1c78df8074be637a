"""The evaluation timeline (KBRL_EVAL_TRACE): what a traced run records, and how bench/trace_timeline.py reads it."""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path

from kernelbench_rl.evaluation import trace
from kernelbench_rl.evaluation.front.api import Evaluator
from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings
from kernelbench_rl.problems import get_problem, list_solutions

REPO = Path(__file__).resolve().parents[1]


def _timeline_module():
    spec = importlib.util.spec_from_file_location("trace_timeline", REPO / "bench" / "trace_timeline.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_childs_spans_are_bounded_and_only_well_formed_rows_are_kept(monkeypatch, tmp_path):
    monkeypatch.setattr(trace, "TRACE_DIR", str(tmp_path))
    monkeypatch.setattr(trace, "_pending", [])
    trace.record_child("L1/1#a", 123, {"spans": [["check_forward", 1.0, 2.0], ["bad", "x", 2.0], "junk", [1, 2, 3]]
                                       + [["many", 3.0, 4.0]] * 100})
    trace.flush()
    rows = [json.loads(line) for line in (tmp_path / f"trace-{os.getpid()}.jsonl").read_text().splitlines()]
    assert rows[0] == {"who": "L1/1#a", "pid": 123, "step": "child_check_forward", "t0": 1.0, "t1": 2.0}
    assert len(rows) == 64 - 3  # at most 64 items read, three of them malformed
    off = trace.ChildSpans(False)
    off.add("check_forward", 1.0)
    assert off.take() == {}
    on = trace.ChildSpans(True)
    on.add("check_forward", 1.0, 2.0)
    assert on.take() == {"spans": [["check_forward", 1.0, 2.0]]} and on.take() == {"spans": []}


def test_an_untraced_run_records_nothing(monkeypatch, tmp_path):
    monkeypatch.setattr(trace, "TRACE_DIR", "")
    monkeypatch.setattr(trace, "_pending", [])
    with trace.span("x", "device_section"):
        pass
    trace.record_child("x", 1, {"spans": [["check_forward", 1.0, 2.0]]})
    trace.flush()
    assert trace._pending == [] and not list(tmp_path.iterdir())


def test_a_traced_evaluation_lines_up_the_workers_and_the_childs_steps(monkeypatch, tmp_path):
    folder = tmp_path / "trace"
    monkeypatch.setenv("KBRL_EVAL_TRACE", str(folder))  # the worker processes read it when they start
    pid, path = next((pid, path) for pid, path in list_solutions() if pid == "L1/19")
    settings = EvalSettings(device="cpu", timeout_s=60)
    with Evaluator(settings, static_checks=False) as evaluator:
        evaluator.problems[pid] = get_problem(pid)
        result = evaluator.evaluate([EvalRequest(pid, path.read_text(), settings)])[0]
    assert result.correct, result.error_message
    timeline = _timeline_module()
    rows, skipped = timeline.load(folder)
    assert skipped == 0
    steps = {row["step"] for row in rows}
    assert {"device_section", "check", "check_receive", "compare", "reference_outputs", "build",
            "child_check_forward", "child_check_inputs", "child_build"} <= steps, steps
    section = next(row for row in rows if row["step"] == "device_section")
    forwards = [row for row in rows if row["step"] == "child_check_forward"]
    assert forwards and all(row["pid"] != section["pid"] for row in forwards)  # the child's, not the worker's
    # one clock: the child's forwards fall inside the worker's section
    assert all(section["t0"] <= row["t0"] <= row["t1"] <= section["t1"] for row in forwards)
    summary = timeline.summarise(rows)
    assert summary["sections"] == 1
    assert 0 < summary["covered_by_worker_steps_s"] <= summary["in_sections_s"]
    assert summary["per_step_in_sections_s"]["child_check_forward"] > 0


def test_the_timeline_tool_says_what_is_wrong_in_one_line(tmp_path):
    import subprocess

    missing = subprocess.run([sys.executable, str(REPO / "bench" / "trace_timeline.py"), str(tmp_path / "nope")],
                             capture_output=True, text=True)
    assert missing.returncode == 2 and "is not a folder" in missing.stderr and "Traceback" not in missing.stderr
    (tmp_path / "trace-1.jsonl").write_text("not json\n")
    empty = subprocess.run([sys.executable, str(REPO / "bench" / "trace_timeline.py"), str(tmp_path)],
                           capture_output=True, text=True)
    assert empty.returncode == 2 and "no trace rows" in empty.stderr


def test_the_summary_finds_the_gaps_between_steps_and_what_ran_beside_a_section():
    timeline = _timeline_module()
    rows = [{"who": "a", "pid": 1, "step": "device_section", "t0": 0.0, "t1": 1.0},
            {"who": "a", "pid": 1, "step": "check", "t0": 0.1, "t1": 0.3},
            {"who": "a", "pid": 2, "step": "child_check_forward", "t0": 0.15, "t1": 0.25},
            {"who": "a", "pid": 1, "step": "profile", "t0": 0.5, "t1": 0.6},
            {"who": "b", "pid": 3, "step": "warm", "t0": 0.2, "t1": 0.9},
            {"who": "b", "pid": 3, "step": "device_section", "t0": 1.5, "t1": 2.0}]
    summary = timeline.summarise(rows)
    assert summary["sections"] == 2 and summary["between_sections_s"] == 0.5
    assert summary["covered_by_worker_steps_s"] == 0.3 and summary["not_covered_s"] == 1.2
    assert summary["per_step_in_sections_s"]["beside: warm"] == 0.7
    assert summary["gaps_in_sections_s"] == {"section start -> section end": 0.5, "profile -> section end": 0.4,
                                             "check -> profile": 0.2, "section start -> check": 0.1}
    assert summary["per_problem"] == {"a": {"sections": 1, "seconds": 1.0, "reference_blocks_s": 0.0},
                                      "b": {"sections": 1, "seconds": 0.5, "reference_blocks_s": 0.0}}
    paired = rows + [{"who": "reference#9", "pid": 9, "step": "reference_block", "t0": 0.6, "t1": 0.8}]
    assert timeline.summarise(paired)["per_problem"]["a"]["reference_blocks_s"] == 0.2
