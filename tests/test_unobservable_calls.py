"""Nothing the candidate can observe tells a checked call from a timed or profiled one.

A candidate that recovers its hidden seed (from torch's generators, once its inputs are made) can redraw where a
perturbation put its sites and compute exactly there only; one that knows the order of its calls can do whole work
where a widened or sensitivity seed falls and partial work elsewhere; one that reads its stack can tell a checked
forward from a timed one. Each attack here is a real Triton ReLU for L1/19 run through the real CPU evaluator (the
stack through the child's own command loop): it must never be paid.
"""

from __future__ import annotations

import json
import math
import multiprocessing
import os
import random
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch

from kernelbench_rl.evaluation.result import ErrorCategory, EvalRequest, EvalSettings
from kernelbench_rl.evaluation.sandbox import runtime, wire
from kernelbench_rl.evaluation.verdict import discrimination, sensitivity
from kernelbench_rl.evaluation.worker.worker import cpu_scope
from kernelbench_rl.problems import get_problem

SETTINGS = EvalSettings(device="cpu", timeout_s=120)

KERNEL = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, limit, shift, BLOCK: tl.constexpr):
    offsets = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offsets < n
    x = tl.load(x_ptr + offsets, mask=mask)
    y = tl.maximum(x, 0.0) + shift
    if limit > 0:  # the wrong kernel: no negative input, nothing above 1, and the problem's own size only
        y = tl.where(offsets < limit, tl.minimum(x, 1.0), 0.0)
    tl.store(out_ptr + offsets, y, mask=mask)


def launch(x, limit=0, shift=0.0):
    x = x.contiguous()
    out = torch.empty_like(x)
    n = x.numel()
    relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, limit, shift, BLOCK=4096)
    return out
'''

# -- 1. the hidden seed ---------------------------------------------------------------------------------------------

# Right only when what the observable gives is the seed the inputs were made from: checked by redrawing the first
# values of L1/19's torch.rand(batch_size, dim) (the problem's own, or widened x -> 2x - 1; perturbed sites are few).
SEED_FROM = KERNEL + '''

def redraws(x, seed):
    first = torch.rand(8, generator=torch.Generator().manual_seed(int(seed))).tolist()
    seen = x.reshape(-1)[:8].tolist()
    matches = max(sum(abs(a - b) < 1e-6 for a, b in zip(first, seen)),
                  sum(abs(2.0 * a - 1.0 - b) < 1e-6 for a, b in zip(first, seen)))
    return matches >= 6


def knows_seed(x):
{body}


class ModelNew(nn.Module):
    def forward(self, x):
        return launch(x, shift=0.0 if knows_seed(x) else 1.0)
'''

STATE_SEED = '''    state = {state}
    seed = int.from_bytes(bytes(state[:8].tolist()), "little")  # the generator's initial seed leads its state
    again = torch.Generator().manual_seed(seed)
    torch.rand(x.numel(), generator=again)  # where the inputs left the global generator
    return torch.equal(again.get_state(), state)'''

SEED_OBSERVABLES = {
    "torch.initial_seed": "    return redraws(x, torch.initial_seed())",
    "torch.random.initial_seed": "    return redraws(x, torch.random.initial_seed())",
    "default_generator.initial_seed": "    return redraws(x, torch.default_generator.initial_seed())",
    "torch.get_rng_state": STATE_SEED.format(state="torch.get_rng_state()"),
    "torch.random.get_rng_state": STATE_SEED.format(state="torch.random.get_rng_state()"),
    "default_generator.get_state": STATE_SEED.format(state="torch.default_generator.get_state()"),
    # The next draw after the inputs, against a generator that made as many values from the seed it guesses.
    "next draw after the inputs": '''    guess = torch.Generator().manual_seed(torch.initial_seed())
    torch.rand(x.numel(), generator=guess)
    expected = int(torch.randint(0, 2**62, (1,), generator=guess))
    return int(torch.randint(0, 2**62, (1,))) == expected''',
}


def test_no_generator_tells_the_candidate_its_hidden_seed(shared_evaluator):
    """Every spelling reaches the runtime (static checks off) and runs: it is judged wrong because what it reads is no
    longer the seed (a mismatch: its kernel adds 1 where it did not recognise the seed)."""
    names = list(SEED_OBSERVABLES)
    requests = [EvalRequest("L1/19", SEED_FROM.format(body=SEED_OBSERVABLES[name]), SETTINGS, request_id=name)
                for name in names]
    with shared_evaluator(SETTINGS, static_checks=False) as evaluator:
        results = evaluator.evaluate(requests)
    for name, result in zip(names, results):
        assert not result.correct, (name, "recovered its hidden seed and was judged correct")
        assert result.error_category == ErrorCategory.MISMATCH, (name, result.error_category.value,
                                                                 result.error_message)


def test_the_worker_and_the_child_make_the_same_inputs_and_leave_no_generator_on_the_seed():
    problem = type(sys)("l1_19")
    exec(compile(get_problem("L1/19").source_for("small"), "l1_19", "exec"), problem.__dict__)
    variant = {"name": sensitivity.PERTURBED, "perturb": {"sites": 32, "length": 1, "strength": 0.5}}
    for chosen in (None, variant):
        first = runtime.make_inputs(problem, 1234, "cpu", "fp32", chosen)
        after = (torch.initial_seed(), torch.get_rng_state(), random.getstate())
        second = runtime.make_inputs(problem, 1234, "cpu", "fp32", chosen)
        assert torch.equal(first[0], second[0])  # alike on both sides, call after call
        assert torch.initial_seed() not in (1234, after[0])
        assert not torch.equal(torch.get_rng_state(), after[1]) and random.getstate() != after[2]
    runtime.build_model(torch.nn.Identity, problem, 42, "cpu", "fp32")
    assert torch.initial_seed() != 42


# -- 2. the order of the calls --------------------------------------------------------------------------------------

# Honest (ReLU) for its first `k` calls, then the wrong kernel: right on L1/19's own inputs (in [0, 1), 16 x 1000),
# wrong on every widened, perturbed and second-shape seed.
FIRST_CALLS = KERNEL + '''
# evaluation {trial}
CALLS = [0]


class ModelNew(nn.Module):
    def forward(self, x):
        CALLS[0] += 1
        return launch(x) if CALLS[0] <= {k} else launch(x, limit=16000)
'''

# Whole work until it meets the second shape (a numel other than the problem's own), the wrong kernel after it.
UNTIL_SECOND_SHAPE = KERNEL + '''
# evaluation {trial}
SEEN = [False]


class ModelNew(nn.Module):
    def forward(self, x):
        SEEN[0] = SEEN[0] or x.numel() != 16000
        return launch(x, limit=16000) if SEEN[0] else launch(x)
'''

# L1/19 at its small sizes runs 7 correctness calls: 2 widened seeds, a perturbed one, one at a second shape, 2 of its
# own, all shuffled, and last the closing seed (every kind combined, in place of a third own seed). The wrong kernel
# fails all but the own seeds. In the old order (specials first, then 3 own seeds) honesty for the first 4 calls, or
# until the second shape, passed every time. Now the closing seed comes after any k < 7 calls and after the second
# shape, and carries it: neither can pass, whatever the shuffle drew (so no evaluation here may pass).
PLAN_CALLS = 7
HONEST_CALLS = (1, 3, 4, 5, 6)


def test_a_kernel_honest_only_for_its_first_calls_or_until_the_second_shape_is_not_paid(shared_evaluator):
    attacks = {f"first {k} calls": [FIRST_CALLS.format(k=k, trial=t) for t in range(2)] for k in HONEST_CALLS}
    attacks["until the second shape"] = [UNTIL_SECOND_SHAPE.format(trial=t) for t in range(4)]
    requests = [EvalRequest("L1/19", source, SETTINGS, request_id=f"{name} #{i}")
                for name, sources in attacks.items() for i, source in enumerate(sources)]
    with shared_evaluator(SETTINGS) as evaluator:
        results = evaluator.evaluate(requests)
    for request, result in zip(requests, results):
        assert not result.correct, (request.request_id, "paid: the order of its calls told it where to be honest")
        assert result.error_category == ErrorCategory.MISMATCH, (request.request_id, result.error_category.value,
                                                                 result.error_message)
        assert result.trials_total == PLAN_CALLS, (request.request_id, result.trials_total, result.versions)
    # The honest kernel for the first 6 calls fails the 7th: the closing seed, and its message says what it combines.
    last = [r for q, r in zip(requests, results) if q.request_id.startswith("first 6 calls")]
    assert all(r.trials_passed == PLAN_CALLS - 1 and "combine every kind" in r.error_message for r in last), [
        (r.trials_passed, r.error_message[:200]) for r in last]


def test_the_correctness_plan_is_shuffled_afresh_and_the_closing_seed_comes_last():
    own, widened = [11, 12], [21, 22]
    perturbed = {"name": sensitivity.PERTURBED, "perturb": {"sites": 32, "length": 1, "strength": 0.5}}
    shape = {"name": sensitivity.SECOND_SHAPE, "constants": {"batch_size": 20}}
    widening = {"name": "symmetric", "affine": [[0, 2.0, -1.0]]}
    closing = (41, {"name": discrimination.CLOSING, "affine": widening["affine"], "perturb": perturbed["perturb"],
                    "constants": shape["constants"]})
    specials = [(31, perturbed), (32, shape)]
    shuffled = len(own) + len(widened) + len(specials)
    runs = 4000
    positions: dict[str, Counter] = {"own": Counter(), "widened": Counter(), perturbed["name"]: Counter(),
                                     shape["name"]: Counter()}
    orders = set()
    shape_last_special = 0
    for _ in range(runs):
        plan = discrimination.correctness_plan(own, widened, widening, specials, closing)
        assert plan[-1] == closing
        assert sorted(plan[:-1], key=repr) == sorted(
            [(s, widening) for s in widened] + specials + [(s, None) for s in own], key=repr)  # every call, once
        orders.add(tuple(seed for seed, _variant in plan))
        kinds = ["own" if v is None else "widened" if v is widening else v["name"] for _s, v in plan[:-1]]
        for index, kind in enumerate(kinds):
            positions[kind][index] += 1
        shape_last_special += [kind for kind in kinds if kind != "own"][-1] == shape["name"]
    # Every kind lands in every shuffled position about as often as its share says (a kind with c of the 6 shuffled
    # calls is expected c/6 of the runs there; 6 standard deviations of slack).
    for kind, counts in positions.items():
        expected = runs * {"own": 2, "widened": 2}.get(kind, 1) / shuffled
        for index in range(shuffled):
            assert abs(counts[index] - expected) < 6 * math.sqrt(expected), (kind, index, counts[index], expected)
    # The second shape alone is the last of the 4 shuffled specials a quarter of the time, not always.
    assert abs(shape_last_special - runs / 4) < 6 * math.sqrt(runs / 4)
    assert len(orders) > 500  # 6! / (2! 2!) = 180 orders of kinds, times the seeds' own orders: drawn afresh
    # The default source is the operating system's entropy: no seeded generator reproduces it.
    random.seed(0)
    first = discrimination.correctness_plan(own, widened, widening, specials)
    random.seed(0)
    assert any(discrimination.correctness_plan(own, widened, widening, specials) != first for _ in range(20))


def test_the_closing_seed_combines_every_kind_where_the_reference_takes_them():
    problem = type(sys)("l1_19")
    exec(compile(get_problem("L1/19").source_for("small"), "l1_19", "exec"), problem.__dict__)

    def run(seed, variant):
        inputs = runtime.make_inputs(problem, seed, "cpu", "fp32", variant)
        return inputs, [torch.relu(inputs[0])]

    found = discrimination.discriminate(run, [1, 2], 1e-4, 1e-4, module=problem,
                                        source=get_problem("L1/19").source_for("small"))
    assert found.variant is not None and len(found.sensitivity.variants()) == 2
    closing = found.closing
    assert closing["name"] == discrimination.CLOSING and {"affine", "perturb", "constants"} <= set(closing)
    (x,) = runtime.make_inputs(problem, 3, "cpu", "fp32", closing)
    assert x.shape == (20, 1000) and float(x.min()) < 0 and float(x.max()) > 1  # wider, perturbed, another size
    assert "combine every kind" in sensitivity.failure_note(closing)
    # One kind alone is the closing seed as it is; a reference that cannot take the kinds combined gets none.
    only = discrimination.Discrimination(variant=found.variant)
    assert discrimination.closing_variant(run, 1, only) == (found.variant, "")

    def picky(seed, variant):
        if variant and len(set(variant) & {"affine", "perturb", "constants"}) > 1:
            raise ValueError("not both")
        return run(seed, variant)
    closing, note = discrimination.closing_variant(picky, 1, found)
    assert closing is None and "raised ValueError" in note


# -- 3. the stack -------------------------------------------------------------------------------------------------

# Writes, for every forward, the stack above it to its working directory: each frame's file, line and function, and
# the names and types of its locals (a command dict in a caller's frame told a checked call from a timed one).
STACK_RECORDER = '''
import json
import os
import sys

import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        frames, frame = [], sys._getframe(1)
        while frame is not None:
            names = sorted((name, type(value).__name__) for name, value in frame.f_locals.items())
            frames.append([frame.f_code.co_filename, frame.f_lineno, frame.f_code.co_name, names])
            frame = frame.f_back
        with open(os.path.join(os.getcwd(), "stacks.jsonl"), "a") as handle:
            handle.write(json.dumps(frames) + "\\n")
        return x * 2.0
'''


def _serve_in_child(conn, device: str) -> None:
    """The child's entry point, in a process of its own, with a host clock for the timing commands (the CPU's child
    is never sent them: it has no device clock)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from host_clock import HOST_CLOCK

    from kernelbench_rl.evaluation.sandbox import child

    child._clock = lambda _device: HOST_CLOCK
    child.child_main(conn, device)


def _answer(conn, wanted: str) -> dict:
    while True:
        message = wire.recv_json(conn)
        if message.get("event") == "error":
            raise AssertionError(message)
        if message.get("event") == wanted:
            return message


def test_every_forward_sees_the_same_stack_whatever_the_call_is_for(tmp_path):
    workdir = tmp_path / "child"
    workdir.mkdir()
    (workdir / "kernel.py").write_text(STACK_RECORDER)
    (workdir / "problem.py").write_text(runtime.without_reference_model(get_problem("L1/19").source_for("small")))
    context = multiprocessing.get_context("spawn")
    ours, theirs = context.Pipe()
    process = context.Process(target=_serve_in_child, args=(theirs, "cpu"), daemon=True)
    process.start()
    try:
        _answer(ours, "ready")
        wire.send_json(ours, {
            "cmd": "job", "workdir": str(workdir), "candidate_path": str(workdir / "kernel.py"),
            "problem_path": str(workdir / "problem.py"), "device": "cpu", "precision": "fp32",
            "env": {"HOME": str(workdir), "TMPDIR": str(workdir), "TRITON_INTERPRET": "1",
                    "PATH": os.environ.get("PATH", "")},
            "drop_uid": False, "landlock": False, "transport": "file", "address_space_mb": None,
        })
        _answer(ours, "started")
        _answer(ours, "loaded")
        wire.send_json(ours, {"cmd": "build", "seed": 1})
        _answer(ours, "built")
        commands = [
            ({"cmd": "warm", "seed": 5}, "warmed", 1),
            ({"cmd": "check", "seed": 6}, "checked", 1),
            ({"cmd": "check", "seed": 7, "variant": {"name": sensitivity.SECOND_SHAPE, "constants": {"batch_size": 20}}},
             "checked", 1),
            ({"cmd": "time", "seeds": [8, 9], "warmup": 1, "verify": [1]}, "timed", 3),
            ({"cmd": "host_time", "seeds": [10, 11]}, "host_timed", 2),
        ]
        expected = []
        for command, answer, forwards in commands:
            wire.send_json(ours, command)
            _answer(ours, answer)
            expected += [command["cmd"]] * forwards
        wire.send_json(ours, {"cmd": "exit"})
        process.join(timeout=30)
    finally:
        if process.is_alive():
            process.kill()
    stacks = [json.loads(line) for line in (workdir / "stacks.jsonl").read_text().splitlines()]
    assert len(stacks) == len(expected), (len(stacks), expected)
    distinct = {json.dumps(stack) for stack in stacks}
    assert len(distinct) == 1, "\n\n".join(
        f"{cmd}:\n" + "\n".join(f"  {name} ({Path(file).name}:{line}) {local}" for file, line, name, local in stack)
        for cmd, stack in zip(expected, stacks))
    names = [name for _file, _line, name, _locals in stacks[0]]
    assert "_serve" in names and "drive" in names and not {"time_forward", "timed_calls", "_profile"} & set(names)


def test_a_cpu_verdict_names_the_sizes_that_ran():
    assert "small sizes" in cpu_scope("small") and "real sizes" not in cpu_scope("small").split(";")[0]
    assert "at the problem's real sizes" in cpu_scope("real") and "small" not in cpu_scope("real")
