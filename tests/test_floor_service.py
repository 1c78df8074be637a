"""The speed-of-light helper process: the same floors as worked out in the worker, reasons for problems without
one, and a helper that dies or falls silent leaves the worker to work floors out itself."""

from __future__ import annotations

import io
import json

import pytest

from kernelbench_rl.evaluation.timing import floor as floors
from kernelbench_rl.evaluation.sandbox import runtime
from kernelbench_rl.evaluation.worker import floor_service
from kernelbench_rl.evaluation.worker.candidate_timing import CandidateTiming

GPU = "NVIDIA H100 80GB HBM3"

MATMUL = """
import torch


class Model(torch.nn.Module):
    def forward(self, a, b):
        return a @ b


def get_inputs():
    return [torch.randn(512, 256), torch.randn(256, 128)]


def get_init_inputs():
    return []
"""

NOT_ON_META = """
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.tensor([float(x.sum())])


def get_inputs():
    return [torch.randn(8)]


def get_init_inputs():
    return []
"""


CHATTY = "print('importing the problem')\n" + MATMUL.replace("return a @ b", "print('forward'); return a @ b")


@pytest.fixture
def problems(tmp_path):
    paths = {}
    for name, source in (("matmul", MATMUL), ("not_on_meta", NOT_ON_META), ("chatty", CHATTY)):
        path = tmp_path / f"{name}.py"
        path.write_text(source)
        paths[name] = str(path)
    return paths


def test_the_helper_loop_answers_each_question_with_a_floor_or_why_not(problems):
    out = io.StringIO()
    questions = [json.dumps({"path": problems["matmul"], "precision": "fp32", "label": "L0/1"}) + "\n",
                 json.dumps({"path": problems["not_on_meta"], "precision": "fp32", "label": "L0/2"}) + "\n",
                 "not json\n"]
    floor_service.serve(GPU, questions, out)
    answers = [json.loads(line) for line in out.getvalue().splitlines()]
    assert len(answers) == 3
    assert answers[0]["floor"]["flops"] == 2 * 512 * 256 * 128
    assert "why" in answers[1] and "why" in answers[2]


def test_the_helper_process_gives_the_floor_the_worker_would_work_out(problems):
    service = floor_service.FloorService(GPU)
    try:
        got = service.floor(problems["matmul"], "fp32", "L0/1")
        mine = floors.problem_floor(runtime.load_module_from_file(problems["matmul"], "kbrl_test_matmul"), "fp32", GPU)
        assert isinstance(got, floors.Floor)
        assert got.as_dict() == mine.as_dict()
        why = service.floor(problems["not_on_meta"], "fp32", "L0/2")
        assert isinstance(why, str) and why
        assert service.floor(problems["matmul"], "fp16", "L0/1").precision == "fp16"  # still serving after a failure
        chatty = service.floor(problems["chatty"], "fp32", "L0/3")  # what a problem prints is not an answer
        assert isinstance(chatty, floors.Floor) and chatty.flops == got.flops
        assert service.floor(problems["matmul"], "fp32", "L0/1").flops == got.flops
    finally:
        service.close()


def test_a_dead_helper_leaves_the_floor_to_the_worker(problems):
    service = floor_service.FloorService(GPU)
    try:
        assert isinstance(service.floor(problems["matmul"], "fp32", "L0/1"), floors.Floor)
        service._process.kill()
        service._process.wait()
        assert service.floor(problems["matmul"], "fp32", "L0/1") is None
        assert service.failure
        assert service.floor(problems["matmul"], "fp32", "L0/1") is None  # not started again: the worker's own way

        # floor_for works it out itself then
        timing = CandidateTiming(None, None, "file", GPU, lambda *a: None, lambda *a: None)
        timing.floor_service = service
        state = type("State", (), {})()
        state.floors, state.path, state.problem_id = {}, problems["matmul"], "L0/1"
        state.module = runtime.load_module_from_file(problems["matmul"], "kbrl_test_matmul_2")
        found = timing.floor_for(state, "fp32")
        assert isinstance(found, floors.Floor) and found.flops == 2 * 512 * 256 * 128
    finally:
        service.close()


def test_a_silent_helper_is_stopped_after_its_wait(problems, monkeypatch):
    monkeypatch.setattr(floor_service, "FIRST_ANSWER_S", 0.5)
    service = floor_service.FloorService(GPU)
    try:
        service._process.send_signal(19)  # SIGSTOP: alive, never answers
        assert service.floor(problems["matmul"], "fp32", "L0/1") is None
        assert "TimeoutError" in service.failure
        assert service._process is None
    finally:
        service.close()


def test_an_answer_that_is_not_a_floor_leaves_it_to_the_worker(problems, monkeypatch):
    service = floor_service.FloorService(GPU)
    try:
        real = json.loads

        def broken(text, *a, **k):
            found = real(text, *a, **k)
            if isinstance(found, dict) and "floor" in found:
                found["floor"].pop("flops")
            return found

        monkeypatch.setattr(floor_service.json, "loads", broken)
        assert service.floor(problems["matmul"], "fp32", "L0/1") is None
        assert "not a floor" in service.failure
    finally:
        service.close()

