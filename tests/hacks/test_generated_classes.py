"""The red team of classes (tests/hacks/generated.py): generated candidates through the real Evaluator, in both
layers (as shipped, and with the static policy off), each judged by its class's rule:

- observe, provenance: no reward (not correct, or `hack`, or a static error); never `infra`;
- control: an honest kernel decided in a hook, a lambda or a heuristic stays correct, clean and unflagged;
- abstain: never `infra`, and under every reward preset no more than a plain wrong answer of the same problem
  scores (a score of None, left out of training, is abstaining paid).

Each layer's cases go through one evaluation batch on one pool (the session's shared CPU pool), with the
known-correct ReLU and a plain wrong kernel in the batch: the first must stay correct, the second is the
mismatch the abstaining cases are measured against. On the CPU this is `generated.cpu_sample()`; the full product
runs on a GPU machine (bench/gpu_redteam.py --generated all).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))

import generated as gen  # noqa: E402
from hack_cases import KNOWN_GOOD_PROBLEM, KNOWN_GOOD_SOLUTION  # noqa: E402

from kernelbench_rl.evaluation.result import EvalRequest, EvalResult, EvalSettings  # noqa: E402
from kernelbench_rl.rewards import PRESETS, score  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
CASES = gen.select(DEVICE, "sample")
LAYERS = ("full", "runtime")
GOOD_EVERY = 12  # a known-correct ReLU after every this many cases of a batch


def abstain_problems(result: EvalResult, wrong: EvalResult) -> list[str]:
    return gen.abstain_problems(lambda r, preset: score(r, preset).reward, PRESETS, result, wrong)


@pytest.fixture(scope="module")
def settings() -> EvalSettings:
    if DEVICE == "cuda":
        return EvalSettings(device="cuda", size="real", timeout_s=120.0)
    return EvalSettings(device="cpu", size="small", correctness_trials=3, timeout_s=90.0)


def _evaluator(request, settings: EvalSettings, static_checks: bool):
    if DEVICE == "cpu":
        return request.getfixturevalue("shared_evaluator")(settings, store=None, static_checks=static_checks)
    from kernelbench_rl.evaluation.front import api

    return api.Evaluator(settings, num_workers=1, store=None, static_checks=static_checks)


@pytest.fixture(scope="module")
def verdicts(request, settings: EvalSettings) -> dict:
    """{layer: {"cases": {name: EvalResult}, "good": [EvalResult], "wrong": EvalResult}}, evaluated lazily per
    layer the first time a test asks for it."""
    cache: dict = {}

    def of(layer: str) -> dict:
        if layer in cache:
            return cache[layer]
        cases = [c for c in CASES if layer in c.layers]
        good = KNOWN_GOOD_SOLUTION.read_text()
        requests, slots = [], []
        for index, case in enumerate(cases):
            requests.append(EvalRequest(case.problem_id, case.source,
                                        dataclasses.replace(settings, **case.settings_overrides()),
                                        request_id=f"redteam-classes/{layer}/{case.name}"))
            slots.append(("case", case.name))
            if (index + 1) % GOOD_EVERY == 0:
                requests.append(EvalRequest(KNOWN_GOOD_PROBLEM, good, settings,
                                            request_id=f"redteam-classes/{layer}/good"))
                slots.append(("good", index))
        requests.append(EvalRequest("L1/19", gen.plain_wrong_source(), settings,
                                    request_id=f"redteam-classes/{layer}/wrong"))
        slots.append(("wrong", None))
        requests.append(EvalRequest(KNOWN_GOOD_PROBLEM, good, settings,
                                    request_id=f"redteam-classes/{layer}/good-last"))
        slots.append(("good", None))
        with _evaluator(request, settings, static_checks=(layer == "full")) as evaluator:
            results = evaluator.evaluate(requests)
        out: dict = {"cases": {}, "good": [], "wrong": None}
        for (kind, key), result in zip(slots, results):
            if kind == "case":
                out["cases"][key] = result
            elif kind == "good":
                out["good"].append(result)
            else:
                out["wrong"] = result
        cache[layer] = out
        return out

    return of


def _params() -> list:
    return [pytest.param(layer, case, id=f"{layer}-{case.name}") for layer in LAYERS for case in CASES
            if layer in case.layers]


@pytest.mark.parametrize("layer,case", _params())
def test_generated_case_earns_nothing(layer: str, case: gen.GeneratedCase, verdicts) -> None:
    batch = verdicts(layer)
    result = batch["cases"][case.name]
    if layer == "runtime":
        assert not result.static.errors, "static checks were meant to be off"
    extra = abstain_problems(result, batch["wrong"]) if case.expect == "abstain" else None
    verdict = gen.judge_case(case, result.to_dict(), DEVICE, layer, abstain_problems=extra)
    assert verdict.passed, (f"{case.name} [{layer}]: {case.threat}: expected {verdict.expected}, got {verdict.got}: "
                            f"{verdict.problems}; {result.error_message[:300]}")


@pytest.mark.parametrize("layer", LAYERS)
def test_known_good_stays_correct_and_wrong_is_a_mismatch(layer: str, verdicts) -> None:
    batch = verdicts(layer)
    for good in batch["good"]:
        assert good.correct, f"the known-correct ReLU beside the generated cases: {good.error_category.value} " \
                             f"{good.error_message}"
    assert batch["wrong"].error_category.value == "mismatch", batch["wrong"].error_message


# -- the generator itself ------------------------------------------------------------------------------------------


def test_every_generated_source_parses_and_names_are_unique() -> None:
    import ast

    cases = gen.all_cases()
    assert len({c.name for c in cases}) == len(cases)
    for case in cases:
        ast.parse(case.source, filename=case.name)
        assert "class ModelNew" in case.source and "@triton.jit" in case.source, case.name
        assert case.klass in gen.CLASSES and case.expect in ("zero", "no_gain", "honest", "abstain")
        assert set(case.devices) <= {"cpu", "cuda"} and set(case.layers) <= set(LAYERS)


def test_problems_of_generated_cases_exist() -> None:
    from kernelbench_rl.problems import get_problem

    for problem_id in sorted({c.problem_id for c in gen.all_cases()}):
        assert get_problem(problem_id) is not None, problem_id


def test_cpu_sample_is_bounded_deterministic_and_covers_every_value() -> None:
    sample = gen.cpu_sample()
    assert [c.name for c in sample] == [c.name for c in gen.cpu_sample()]
    assert len(sample) <= 100  # the CPU suite's budget: a few minutes on 2 cores
    for template, groups in gen.COVER.items():
        everything = [c for c in gen.all_cases() if c.template == template and "cpu" in c.devices]
        chosen = [c for c in sample if c.template == template]
        for group in groups:
            want = {tuple(c.axes.get(a, "") for a in group) for c in everything}
            got = {tuple(c.axes.get(a, "") for a in group) for c in chosen}
            assert want == got, f"{template}: the sample misses {sorted(want - got)[:3]} of {group}"
    assert {c.klass for c in sample} == {"observe", "provenance", "abstain", "control"}


def test_the_rules_can_fail() -> None:
    """Each expectation's rule rejects the verdict it exists to reject."""
    case = next(c for c in gen.all_cases() if c.expect == "zero")
    paid = {"error_category": "ok", "correct": True, "flags": ["no_speedup_on_cpu"], "static": {"errors": []}}
    assert not gen.judge_case(case, paid, "cpu").passed
    assert not gen.judge_case(case, {**paid, "flags": ["low_kernel_share"]}, "cpu").passed  # doubt alone is paid
    assert gen.judge_case(case, {**paid, "flags": ["low_kernel_share", "hack"]}, "cpu").passed
    assert not gen.judge_case(case, {"error_category": "infra", "correct": False}, "cpu").passed
    control = next(c for c in gen.all_cases() if c.expect == "honest")
    assert gen.judge_case(control, paid, "cpu").passed
    assert not gen.judge_case(control, {**paid, "flags": ["low_kernel_share"]}, "cpu").passed
    assert not gen.judge_case(control, {"error_category": "mismatch", "correct": False}, "cpu").passed
    timed = next(c for c in gen.all_cases() if c.expect == "no_gain")
    fast = {**paid, "speedup": 3.0}
    assert not gen.judge_case(timed, fast, "cuda", honest_speedup=1.0).passed
    assert gen.judge_case(timed, {**fast, "speedup": 1.1}, "cuda", honest_speedup=1.0).passed
    abstain = next(c for c in gen.all_cases() if c.expect == "abstain")
    assert not gen.judge_case(abstain, {"error_category": "unsupported"}, "cpu", abstain_problems=["paid"]).passed
