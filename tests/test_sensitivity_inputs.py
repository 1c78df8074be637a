"""The sensitivity seeds (verdict/sensitivity.py, sandbox/perturbation.py) on problems with more than one input and
at both ends of an input: every perturbable input is perturbed, whichever position it holds; the audit sizes its
search by the largest of them and calibrates on whichever the reference reads; a perturbation it picks moves the
reference at the head site and at the tail site alike; and perturbed values land above the input's finite range
whatever that range is (negative, offset, with infinities). No sandbox, no subprocess: the fast tier.
"""

from __future__ import annotations

import math
import types

import pytest
import torch

from kernelbench_rl.evaluation.sandbox import perturbation
from kernelbench_rl.evaluation.verdict import checks, discrimination, sensitivity


def _variant(sites: int, length: int, strength: float | None, only: int | None = None) -> dict:
    spec = {"sites": sites, "length": length, "strength": strength}
    if only is not None:
        spec["only"] = only
    return {"name": sensitivity.PERTURBED, "perturb": spec}


def _runner(forward, make):
    """The audit's `run(seed, variant)` for a reference `forward` over the inputs `make()` builds after the seed."""
    def run(seed, variant):
        torch.manual_seed(seed)
        inputs = perturbation.perturb_inputs(discrimination.apply_variant(make(), variant), seed, variant)
        return inputs, [forward(*inputs)]
    return run


def _moves(run, variant, own, atol, rtol) -> bool:
    _inputs, outputs = run(1, variant)
    return not checks.compare_outputs(outputs, own, atol, rtol, margin=sensitivity.MOVE_FACTOR).ok


# -- every perturbable input -----------------------------------------------------------------------------------


@pytest.mark.parametrize("layout", ["float first", "float after an integer", "floats around a small one"])
def test_every_perturbable_input_is_perturbed_whatever_its_position(layout):
    torch.manual_seed(0)
    big = [torch.rand(512), torch.rand(32, 16), torch.rand(1000)]
    inputs = {
        "float first": [big[0], big[1], big[2]],
        "float after an integer": [torch.randint(0, 9, (64,)), big[0], big[1], big[2]],
        "floats around a small one": [big[0], torch.rand(4), big[1], 3.0, big[2]],
    }[layout]
    expected = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point()
                and x.numel() >= perturbation.MIN_ELEMENTS]
    assert perturbation.perturbable(inputs) == expected and len(expected) == 3
    originals = [x.clone() if isinstance(x, torch.Tensor) else x for x in inputs]
    out = perturbation.perturb_inputs([x.clone() if isinstance(x, torch.Tensor) else x for x in inputs], 5,
                                      _variant(8, 2, 16.0))
    for i, (before, after) in enumerate(zip(originals, out)):
        if i in expected:
            changed = (after.reshape(-1) != before.reshape(-1)).nonzero().flatten()
            # one site in each eighth of every perturbed input, above that input's own range
            assert set((changed * 8 // before.numel()).tolist()) == set(range(8)), (layout, i)
            assert bool((after.reshape(-1)[changed] > before.max()).all())
        elif isinstance(before, torch.Tensor):
            assert torch.equal(after, before), (layout, i)  # integers beside floats, small tensors: untouched
        else:
            assert after == before


def test_integer_inputs_are_all_perturbed_when_none_is_floating():
    torch.manual_seed(0)
    first, second = torch.randint(0, 100, (256,)), torch.randint(1000, 1100, (64, 8))
    flags = torch.rand(64) > 0.5
    inputs = [first.clone(), flags.clone(), second.clone()]
    assert perturbation.perturbable(inputs) == [0, 2]
    out = perturbation.perturb_inputs(inputs, 3, _variant(4, 8, None))
    assert torch.equal(out[1], flags)
    for before, after in ((first, out[0]), (second, out[2])):
        assert not torch.equal(after, before)
        assert set(after.reshape(-1).tolist()) <= set(before.reshape(-1).tolist())  # each its own values


def test_the_audit_calibrates_on_an_input_that_is_not_the_first(monkeypatch):
    """The reference reads only its second input (a mean of 65,536 values behind a small first input): the audit
    finds the sites long enough to move it there, and sizes its budget by the search over that input, not over the
    first one (each run costs 0.5 s on a clock the audit reads)."""
    now = [0.0]
    monkeypatch.setattr(sensitivity, "time", types.SimpleNamespace(perf_counter=lambda: now[0]))
    inner = _runner(lambda weights, x: 4.0 * (x < 0.5).float().mean() + 0.0 * weights.sum(),
                    lambda: [torch.rand(16), torch.rand(1 << 16)])

    def run(seed, variant):
        now[0] += 0.5
        return inner(seed, variant)

    found = sensitivity.audit(run, [1, 2], 0.05, 0.02)
    assert found.perturbation is not None and not found.out_of_time, found.summary()
    assert found.budget_s == sensitivity.audit_budget(0.5, sensitivity.search_runs(1 << 16, True))
    assert found.budget_s != sensitivity.audit_budget(0.5, sensitivity.search_runs(16, True))
    spec = found.perturbation["perturb"]
    assert spec["length"] > 1
    _inputs, own = run(1, None)
    for only in (0, spec["sites"] - 1):
        assert _moves(run, _variant(spec["sites"], spec["length"], spec["strength"], only), own, 0.05, 0.02)


def test_the_search_grows_with_the_largest_input():
    assert sensitivity.search_runs(1 << 20, True) > sensitivity.search_runs(1 << 10, True) > \
        sensitivity.search_runs(16, True)
    assert sensitivity.search_runs(1 << 16, True) > sensitivity.search_runs(1 << 16, False)


# -- both ends of an input -------------------------------------------------------------------------------------


@pytest.mark.parametrize("heavy_end", ["head", "tail"])
def test_a_chosen_perturbation_moves_the_reference_at_the_head_and_at_the_tail(heavy_end):
    """A weighted mean whose weights fall 256-fold from one end to the other: one site at the light end must move
    the reference as much as at the heavy end, so the audit may not settle for what moves the heavy end alone."""
    n = 1 << 14
    weights = torch.logspace(0, -8, n, base=2.0)
    if heavy_end == "tail":
        weights = weights.flip(0)
    run = _runner(lambda x: (x * weights).sum() / weights.sum(), lambda: [torch.rand(n)])
    atol = rtol = 1e-4
    found = sensitivity.audit(run, [1, 2], atol, rtol)
    assert found.perturbation is not None, found.summary()
    spec = found.perturbation["perturb"]
    _inputs, own = run(1, None)
    sites = min(spec["sites"], n)
    for only in (0, sites - 1):
        assert _moves(run, _variant(spec["sites"], spec["length"], spec["strength"], only), own, atol, rtol), (
            heavy_end, only, spec)


def test_an_input_smaller_than_the_site_count_keeps_every_site_and_its_tail():
    """16 elements, 32 sites asked: every element is a site, the last one is the tail, and an elementwise reference
    gets the most sites at the shortest length."""
    found = sensitivity.audit(_runner(torch.sigmoid, lambda: [torch.rand(16)]), [1, 2], 1e-4, 1e-4)
    assert found.perturbation["perturb"] == {"sites": 32, "length": 1, "strength": 0.5}
    x = torch.rand(16)
    tail = perturbation.perturb_inputs([x.clone()], 1, _variant(32, 1, 0.5, only=15))[0]
    assert (tail != x).nonzero().flatten().tolist() == [15]


@pytest.mark.parametrize(("low", "high"), [(0.0, 1.0), (-3.0, -1.0), (1000.0, 1000.5), (-50.0, 70.0)])
@pytest.mark.parametrize("strength", perturbation.STRENGTHS)
def test_perturbed_values_sit_above_the_inputs_range_by_the_strength(low, high, strength):
    """Values start `strength` x the range's width above its top (at most 6 x: u < 4, the ramp < 1.5), whatever
    the range's sign and offset; the untouched elements stay as they were."""
    torch.manual_seed(1)
    x = (low + (high - low) * torch.rand(4096, dtype=torch.float64))
    x[0], x[-1] = low, high  # the range's ends are in the tensor
    span = high - low
    out = perturbation.perturb_inputs([x.clone()], 7, _variant(8, 16, strength))[0]
    changed = out != x
    assert int(changed.sum()) == 8 * 16
    values = out[changed]
    assert bool((values >= high + strength * span * (1 - 1e-9)).all()), (values.min(), high, span)
    assert bool((values < high + 6 * strength * span).all()), (values.max(), high, span)
    assert torch.equal(out[~changed], x[~changed])


def test_the_range_ignores_infinities_and_nans_at_either_end(monkeypatch):
    """Non-finite values do not set the range (chunk by chunk: a chunk of the tensor holding only infinities
    included); the top comes from the finite values."""
    monkeypatch.setattr(perturbation, "_CHUNK", 64)
    torch.manual_seed(2)
    x = torch.rand(1024, dtype=torch.float64) * 2.0 - 5.0  # in [-5, -3)
    x[:64] = math.inf  # a whole chunk of infinities
    x[100], x[700], x[900] = -math.inf, math.nan, math.inf
    finite = x[torch.isfinite(x)]
    low, high = perturbation._finite_range(x)
    assert (low, high) == (float(finite.min()), float(finite.max()))
    assert perturbation._finite_range(torch.full((128,), math.inf)) == (0.0, 0.0)
    out = perturbation.perturb_inputs([x.clone()], 4, _variant(4, 8, 16.0))[0]
    changed = torch.isfinite(out) & (out != x) & torch.isfinite(x)
    assert changed.any()
    span = high - low
    assert bool((out[changed] >= high + 16.0 * span * (1 - 1e-9)).all())
    assert bool((out[changed] < high + 96.0 * span).all())


def test_a_constant_input_still_gets_values_above_it():
    """No width to scale by: the value itself sets the scale (at least 1), so the sites still move."""
    for value in (0.5, -2.0, 300.0):
        x = torch.full((256,), value, dtype=torch.float64)
        out = perturbation.perturb_inputs([x.clone()], 1, _variant(4, 4, 0.5))[0]
        changed = out != x
        assert int(changed.sum()) == 16
        assert bool((out[changed] >= value + 0.5 * max(abs(value), 1.0) * (1 - 1e-9)).all())


# -- the perturbation's edges (found by mutation testing: bench/RESULTS.md, "Mutation testing") --------------------


def test_the_same_seed_gives_the_same_perturbation_whatever_the_global_generator():
    """The worker and the candidate's process draw the sites and the values from the seed alone: torch's global
    generator, wherever each process left it, plays no part."""
    x = torch.randint(1, 1000, (512,))
    made = []
    for global_seed in (1, 2):
        torch.manual_seed(global_seed)
        made.append(perturbation.perturb_inputs([x.clone()], 9, _variant(8, 4, None))[0])
    assert torch.equal(made[0], made[1]) and not torch.equal(made[0], x)


def test_different_seeds_give_different_perturbations():
    x = torch.rand(256)
    seen = {tuple(perturbation.perturb_inputs([x.clone()], seed, _variant(2, 1, 16.0))[0].tolist())
            for seed in range(200)}
    assert len(seen) == 200


def test_every_element_can_be_a_site_and_every_value_a_source():
    """Over seeds, the sites cover every element of each stratum (the tail's last ones included), and an integer
    site may copy any element of the input (the first one included)."""
    x = torch.rand(32)
    covered = set()
    for seed in range(300):
        covered |= set((perturbation.perturb_inputs([x.clone()], seed, _variant(4, 2, 16.0))[0] != x)
                       .nonzero().flatten().tolist())
    assert covered == set(range(32))
    ints = torch.ones(16, dtype=torch.int64)
    ints[0] = 7
    copied = False
    for seed in range(50):
        out = perturbation.perturb_inputs([ints.clone()], seed, _variant(16, 1, None))[0]
        copied |= bool((out[1:] == 7).any())
    assert copied


def test_site_counts_and_lengths_are_as_asked():
    x = torch.rand(1000)
    for sites, length in ((1, 4), (8, 1), (3, 5)):
        out = perturbation.perturb_inputs([x.clone()], 2, _variant(sites, length, 16.0))[0]
        assert int((out != x).sum()) == sites * length, (sites, length)


def test_a_floating_input_without_a_strength_gets_the_mildest():
    x = torch.rand(4096, dtype=torch.float64)
    low, high = float(x.min()), float(x.max())
    out = perturbation.perturb_inputs([x.clone()], 3, _variant(8, 8, None))[0]
    values = out[out != x]
    span = high - low
    assert bool((values >= high + perturbation.STRENGTHS[0] * span * (1 - 1e-9)).all())
    assert bool((values < high + 6 * perturbation.STRENGTHS[0] * span).all())


def test_the_range_reads_the_first_element_too(monkeypatch):
    monkeypatch.setattr(perturbation, "_CHUNK", 16)
    x = torch.rand(256, dtype=torch.float64)
    x[0] = 5.0  # the maximum, first
    out = perturbation.perturb_inputs([x.clone()], 1, _variant(8, 2, 0.5))[0]
    assert bool((out[out != x] >= 5.0 + 0.5 * (5.0 - float(x.min())) * (1 - 1e-9)).all())


def test_a_constant_inputs_values_are_scaled_by_the_value_or_one():
    for value in (0.5, -2.0, 300.0):
        x = torch.full((256,), value, dtype=torch.float64)
        out = perturbation.perturb_inputs([x.clone()], 1, _variant(4, 4, 0.5))[0]
        scale = max(abs(value), 1.0)
        assert bool((out[out != x] < value + 6 * 0.5 * scale).all()), value


def test_a_non_contiguous_input_is_perturbed_in_place():
    base = torch.rand(64, 32)
    x = base.t()  # a view, not contiguous
    before = x.clone()
    (out,) = perturbation.perturb_inputs([x], 4, _variant(8, 2, 16.0))
    assert out is x and int((x != before).sum()) == 16
    assert torch.equal(base.t(), x)  # the perturbation reached the tensor's own memory


@pytest.mark.parametrize(("tensor", "expected"), [
    (torch.tensor(1.0), False),  # a scalar
    (torch.tensor([1.0, 1.0, 2.0]), True),  # ties are sorted
    (torch.tensor([1.0, 2.0]), True),
    (torch.tensor([3.0]), False),  # one element: nothing to keep
    (torch.tensor([[0.0, 1.0, 2.0], [0.0, 3.0, 2.0]]), False),  # the first row sorted, not the second
    (torch.tensor([[0.0, 3.0, 2.0], [0.0, 1.0, 2.0]]), False),
])
def test_sorted_inputs_are_told_by_every_row(tensor, expected):
    assert perturbation._sorted_last(tensor) is expected


def _symmetric_matrix(n: int) -> torch.Tensor:
    a = torch.rand(n, n)
    return a + a.T


def test_symmetric_inputs_are_told_whatever_their_batch():
    assert perturbation._symmetric(_symmetric_matrix(2)) is True
    assert perturbation._symmetric(torch.ones(1, 1)) is False
    assert perturbation._symmetric(_symmetric_matrix(4)[None]) is True  # a batch of one
    assert perturbation._symmetric(torch.stack([_symmetric_matrix(4)] * 2)[:, None]) is True  # (2, 1, 4, 4)
    wide = _symmetric_matrix(80)
    wide[70, 75] += 1.0  # symmetric in the first 64 x 64, not beyond
    assert perturbation._symmetric(wide) is False


# -- the audit's search ------------------------------------------------------------------------------------------


def test_the_search_counts_its_runs():
    """For each site count and strength: head and tail at the shortest and the longest length, a bisection of
    ceil(log2(top)) steps (head and tail each), all sites together; then the second shape's tries."""
    assert sensitivity._top_level(1 << 16, 32) == 3  # 1024 elements a half stratum: 16 ** 3 reaches it
    assert sensitivity._top_level(16, 32) == 0
    assert sensitivity._top_level(33 * 32, 32) == 1  # a half stratum of 16 elements: length 16 is there
    assert sensitivity._top_level(34 * 32, 32) == 2  # of 17: one level more
    # 1 << 16: tops 3, 3 and 4, two bisection steps each: 3 strengths x 9 runs x 3 site counts, and 3 tries
    assert sensitivity.search_runs(1 << 16, True) == 84
    assert sensitivity.search_runs(1 << 16, False) == 30
    assert sensitivity.search_runs(16, True) == 48  # no bisection: 3 x 5 x 3 + 3
    assert sensitivity.audit_budget(None, 84) == sensitivity.AUDIT_BUDGET_S


class _FakeClock:
    def __init__(self, monkeypatch, start: float = 1000.0) -> None:
        self.now = start
        monkeypatch.setattr(sensitivity, "time", types.SimpleNamespace(perf_counter=lambda: self.now))


def _timed(clock: _FakeClock, seconds: float, run):
    runs = []

    def timed_run(seed, variant):
        clock.now += seconds
        runs.append(variant)
        return run(seed, variant)
    return timed_run, runs


_COUNTING = _runner(lambda x: 4.0 * (x < 0.5).float().mean(), lambda: [torch.rand(1 << 16)])


def test_the_audit_stops_exactly_at_its_budget(monkeypatch):
    """2 s a run against a budget of 10 s: a run starts only if it ends by the deadline, so 5 runs (the last one
    ending on the deadline), and the audit says it ran out."""
    clock = _FakeClock(monkeypatch)
    run, runs = _timed(clock, 2.0, _COUNTING)
    found = sensitivity.audit(run, [1, 2], 0.05, 0.02, budget_s=10.0)
    assert len(runs) == 5 and found.budget_s == 10.0
    assert found.out_of_time is True and found.perturbation is None
    assert found.notes == ["no perturbation: the reference's forwards took the audit's 10 s",
                           "no second shape: the problem's module was not given",
                           "the audit's 10 s ran out before both kinds were settled: no verdict on this problem"]


def test_a_known_forward_time_bounds_the_runs_from_the_start(monkeypatch):
    """Told a forward takes 20 s, the audit starts no run that would end past its 30 s, however quick the runs it
    sees are."""
    clock = _FakeClock(monkeypatch)
    run, runs = _timed(clock, 1.0, _COUNTING)
    found = sensitivity.audit(run, [1, 2], 0.05, 0.02, forward_s=20.0, budget_s=30.0)
    assert len(runs) == 11 and found.out_of_time is True


def test_a_found_perturbation_is_all_the_audit_says(monkeypatch):
    clock = _FakeClock(monkeypatch)
    run, _runs = _timed(clock, 0.01, _runner(torch.sigmoid, lambda: [torch.rand(64, 256)]))
    found = sensitivity.audit(run, [1, 2], 1e-4, 1e-4)
    assert found.perturbation == {"name": sensitivity.PERTURBED,
                                  "perturb": {"sites": 32, "length": 1, "strength": 0.5}}
    assert found.notes == ["no second shape: the problem's module was not given"]
    assert found.out_of_time is False
    assert found.budget_s == sensitivity.AUDIT_BUDGET_S


def test_no_tensor_input_is_no_perturbation(monkeypatch):
    clock = _FakeClock(monkeypatch)
    run, _runs = _timed(clock, 1.0, lambda seed, variant: ([3, 4.0], [torch.ones(2) * seed]))
    found = sensitivity.audit(run, [1, 2], 1e-4, 1e-4)
    assert found.perturbation is None and found.out_of_time is False
    assert found.notes[0] == "no perturbation: no input tensor to perturb"
    assert found.budget_s == sensitivity.audit_budget(1.0, sensitivity.search_runs(1, False))


def _level_is_mildest(run, spec, own, atol, rtol) -> None:
    """The chosen length moves the reference at the head and the tail; one level shorter does not at one of them."""
    for only in (0, spec["sites"] - 1):
        assert _moves(run, _variant(spec["sites"], spec["length"], spec["strength"], only), own, atol, rtol)
    if spec["length"] > 1:
        shorter = spec["length"] // sensitivity.LENGTH_BASE
        assert not all(_moves(run, _variant(spec["sites"], shorter, spec["strength"], only), own, atol, rtol)
                       for only in (0, spec["sites"] - 1))


@pytest.mark.parametrize(("n", "tolerance", "length"), [(1 << 16, 1e-5, 16), (1 << 16, 2e-4, 256), (1024, 1e-3, 16)])
def test_a_mean_gets_the_shortest_sites_that_move_it(n, tolerance, length):
    run = _runner(lambda x: x.mean(), lambda: [torch.rand(n)])
    found = sensitivity.audit(run, [1, 2], tolerance, tolerance)
    assert found.perturbation["perturb"] == {"sites": 32, "length": length, "strength": 0.5}, found.summary()
    _level_is_mildest(run, found.perturbation["perturb"], run(1, None)[1], tolerance, tolerance)


def test_a_reference_only_strong_values_move_gets_the_milder_strength_that_does():
    run = _runner(lambda x: torch.relu(x - 5.0).sum(), lambda: [torch.rand(4096)])
    found = sensitivity.audit(run, [1, 2], 1e-4, 1e-4)
    assert found.perturbation["perturb"] == {"sites": 32, "length": 1, "strength": 16.0}


def test_all_sites_together_must_move_it_too_at_some_strength():
    """One site alone moves this reference (an odd count of values above 1), all of them together cancel out, unless
    a value passes 10: the audit goes on to the stronger values rather than to fewer sites."""
    parity = _runner(lambda x: ((x > 1.0).sum() % 2).float() + (x > 10.0).any().float(), lambda: [torch.rand(4096)])
    found = sensitivity.audit(parity, [1, 2], 1e-4, 1e-4)
    assert found.perturbation["perturb"] == {"sites": 32, "length": 1, "strength": 16.0}
    cancels = _runner(lambda x: ((x > 1.0).sum() % 2).float(), lambda: [torch.rand(4096)])
    found = sensitivity.audit(cancels, [1, 2], 1e-4, 1e-4)
    assert found.perturbation is None
    assert found.notes[0] == ("no perturbation: no site moved the reference's outputs by 4 tolerances (all sites "
                              "together did not move the reference)")


def test_integer_inputs_get_no_strength():
    run = _runner(lambda x: x.float().sum(), lambda: [torch.randint(1, 1000, (4096,))])
    found = sensitivity.audit(run, [1, 2], 1e-4, 1e-4)
    assert found.perturbation["perturb"]["strength"] is None


def test_a_reference_blind_to_the_head_gets_no_perturbation_on_that_many_sites():
    n = 4096
    run = _runner(lambda x: x[n // 32:].mean() * 1000, lambda: [torch.rand(n)])
    found = sensitivity.audit(run, [1, 2], 1e-4, 1e-4)
    assert found.perturbation is None or found.perturbation["perturb"]["sites"] < 32


def test_what_the_reference_cannot_take_is_never_chosen():
    """Non-finite on every perturbation, raising on every one, or non-finite where a single site is alone: no
    perturbation, and the note says why."""
    blows_up = _runner(lambda x: torch.exp(x * 80.0), lambda: [torch.rand(256)])
    found = sensitivity.audit(blows_up, [1, 2], 1e-4, 1e-4)
    assert found.perturbation is None
    assert found.notes[0] == ("no perturbation: no site moved the reference's outputs by 4 tolerances (the reference "
                              "is not finite)")

    def refuses(x):
        if x.max() > 1.0:
            raise ValueError("out of range")
        return x * 2

    found = sensitivity.audit(_runner(refuses, lambda: [torch.rand(256)]), [1, 2], 1e-4, 1e-4)
    assert found.perturbation is None and found.notes[0].endswith("(the reference raised ValueError)")
    lonely = _runner(lambda x: 1.0 / ((x > 1.0).sum().float() - 1.0), lambda: [torch.rand(4096)])
    assert sensitivity.audit(lonely, [1, 2], 1e-4, 1e-4).perturbation is None


def test_a_long_note_is_cut_at_300_characters():
    error = type("E" * 400, (Exception,), {})

    def refuses(x):
        if x.max() > 1.0:
            raise error()
        return x * 2

    found = sensitivity.audit(_runner(refuses, lambda: [torch.rand(256)]), [1, 2], 1e-4, 1e-4)
    assert len(found.notes[0]) == 300 and found.notes[0].startswith("no perturbation: no site moved")


def test_the_note_lists_every_distinct_reason_or_none():
    ignored = _runner(lambda x: x.shape[0] * torch.ones(3), lambda: [torch.rand(256)])
    assert sensitivity.audit(ignored, [1, 2], 1e-4, 1e-4).notes[0] == (
        "no perturbation: no site moved the reference's outputs by 4 tolerances")

    def fragile(x):
        if x.max() > 100.0:
            raise ValueError("too large")
        return torch.exp(x * 80.0)  # not finite past 1.1

    found = sensitivity.audit(_runner(fragile, lambda: [torch.rand(256)]), [1, 2], 1e-4, 1e-4)
    assert found.notes[0] == ("no perturbation: no site moved the reference's outputs by 4 tolerances (the reference "
                              "is not finite; the reference raised ValueError)")


def test_longer_sites_at_the_stronger_values_are_searched_at_those_values():
    """Only values past 5 move this mean of 65,536 elements, and one element is not enough: the search for the
    length runs at the strength that moves it."""
    run = _runner(lambda x: torch.relu(x - 5.0).mean() + 1.0, lambda: [torch.rand(1 << 16)])
    found = sensitivity.audit(run, [1, 2], 4e-4, 4e-4)
    spec = found.perturbation["perturb"]
    assert spec["strength"] == 16.0 and spec["length"] > 1, spec
    _level_is_mildest(run, spec, run(1, None)[1], 4e-4, 4e-4)
