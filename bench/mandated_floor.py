"""The GPU work the evaluator's rules require, done bare: one process, no isolation, no scheduling, nothing else.

The rules (DESIGN.md) ask for more GPU work than the GRPO-shaped batch's floor (grpo_batch.py's FLOOR_DEFINITION)
counts: fresh inputs made on the device for every correctness trial and every timed call, an L2 flush and a full
synchronise around each timed call, the reference's outputs for the correctness seeds and the comparison. This does
exactly that for the same batch, in this one process, with the library's own input maker and timing loop, and
reports `bare_wall_s` (problem loading excluded), `floor_s` (FLOOR_DEFINITION from its own medians), `bare_over_floor`,
and per problem the median call and the GPU time of one call's fresh inputs. grpo_batch.py's wall over `bare_wall_s`
is the price of everything the evaluator adds to the rules (isolation above all).

    python3 bench/mandated_floor.py --problems-root .kb --out mandated.json      # on a GPU, real size
    python3 bench/mandated_floor.py --device cpu --size small --problems L1/19,L2/76 --samples 2   # machinery only
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import grpo_batch  # noqa: E402 - after the path set-up above
import harness  # noqa: E402
from harness import say  # noqa: E402

INPUT_PROBES = 5  # fresh input sets event-timed per problem, for the GPU cost of one call's inputs


def _synchronize(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def input_cost_ms(make: Any, device: str, probes: int = INPUT_PROBES) -> float | None:
    """Median GPU time of making one fresh input set (None on the CPU)."""
    import torch

    if device != "cuda":
        return None
    times = []
    for index in range(probes):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        torch.cuda.synchronize()
        start.record()
        inputs = make(0x3C3C3C + index)
        end.record()
        end.synchronize()
        times.append(float(start.elapsed_time(end)))
        del inputs
    return statistics.median(times)


def run_problem(problem: Any, size: str, samples: int, settings: dict[str, Any], device: str,
                workdir: str) -> dict[str, Any]:
    """One problem's share of the batch: baseline, then each sample's correctness trials, warm-up and timed calls."""
    import secrets

    import torch

    from kernelbench_rl.evaluation.sandbox import runtime
    from kernelbench_rl.evaluation.sandbox import timer
    from kernelbench_rl.evaluation.verdict import checks
    from kernelbench_rl.evaluation.worker import memory
    from kernelbench_rl.evaluation.sandbox.outputs import plain_outputs
    from kernelbench_rl.evaluation.result import tolerance_for

    path = Path(workdir) / f"problem_{problem.id.replace('/', '_')}.py"
    path.write_text(problem.source_for(size))
    module = runtime.load_module_from_file(path, f"bare_{problem.id.replace('/', '_')}", register=False)
    precision = "fp32"
    atol, rtol = tolerance_for("kernelbench", precision)
    clock = timer.Clock.capture() if device == "cuda" else None
    init_seed = secrets.randbits(31)

    def make(seed: int) -> list[Any]:
        return runtime.make_inputs(module, seed, device, precision)

    sample_inputs = make(1)
    input_bytes = sum(t.numel() * t.element_size() for t in runtime.tensor_inputs(sample_inputs))
    del sample_inputs
    fresh = input_bytes <= memory.FRESH_INPUTS_MAX_BYTES
    warm, timed, trials = settings["warmup_trials"], settings["timing_trials"], settings["correctness_trials"]
    parts = dict.fromkeys(("build", "correctness", "timed", "baseline"), 0.0)

    @contextlib.contextmanager
    def part(name: str) -> Iterator[None]:
        """The block's seconds, up to the device's end of its work, added to `parts[name]`."""
        mark = time.perf_counter()
        yield
        _synchronize(device)
        parts[name] += time.perf_counter() - mark

    _synchronize(device)
    started = time.perf_counter()

    def timed_block(model: Any) -> list[float]:
        seeds = [secrets.randbits(31) for _ in range(timed)]
        if device != "cuda":  # the machinery only: one call per seed, no clock to trust
            with torch.no_grad():
                for seed in seeds[:2]:
                    model(*make(seed))
            return []
        return timer.time_forward(model, make, seeds, warm, device, clock, fresh_buffers=fresh).times_ms

    with part("baseline"):
        reference = runtime.build_model(module.Model, module, init_seed, device, precision)
        baseline_ms = timed_block(reference)
    with part("build"):
        models = [runtime.build_model(module.Model, module, init_seed, device, precision) for _ in range(samples)]

    # Correctness: a seed's reference outputs once, then every sample on that seed's fresh inputs, compared on the
    # device (one seed's outputs alive at a time, as the worker keeps them).
    wrong: list[str] = []
    with part("correctness"), torch.no_grad():
        for _ in range(trials):
            seed = secrets.randbits(31)
            expected = list(plain_outputs(reference(*make(seed))))
            for number, model in enumerate(models):
                got = list(plain_outputs(model(*make(seed))))
                outcome = checks.compare_outputs(expected, got, atol, rtol)
                if not outcome.ok:
                    wrong.append(f"s{number}: {outcome.message}"[:200])
                del got
            del expected
    per_sample_ms = []
    with part("timed"):
        for model in models:
            times = timed_block(model)
            if times:
                per_sample_ms.append(statistics.median(times))
    wall = time.perf_counter() - started
    inputs_ms = input_cost_ms(make, device)
    del models, reference
    if device == "cuda":
        torch.cuda.empty_cache()
    base_median = statistics.median(baseline_ms) if baseline_ms else None
    # The floor exactly as the batch's is defined (grpo_batch.gpu_floor), from this loop's own medians.
    floor_s = grpo_batch.gpu_floor([{"problem_id": problem.id, "correct": True, "runtime_ms": ms, "trials_total": trials,
                                     "baseline_ms": base_median} for ms in per_sample_ms], settings)["total_s"]
    return {
        "problem_id": problem.id, "name": problem.name, "samples": samples, "wall_s": round(wall, 4),
        "parts_s": {k: round(v, 4) for k, v in parts.items()}, "floor_s": round(floor_s, 4),
        "baseline_ms": base_median, "sample_median_ms": per_sample_ms, "inputs_ms": inputs_ms,
        "input_bytes": input_bytes, "fresh_buffers": fresh, "wrong": wrong,
    }


def run_levels(chosen: dict[int, list[Any]], args: argparse.Namespace, settings: dict[str, Any]) -> dict[str, Any]:
    import torch

    from kernelbench_rl.evaluation.sandbox import numerics

    numerics.apply()  # the evaluator's numerics: exact fp32, no cuDNN autotuning
    torch.set_grad_enabled(False)
    if args.device == "cuda":
        # cuBLAS's and cuDNN's handles before the clock, as the evaluator's pool is warmed before its clock: a start
        # (about 2 s) the first problem's correctness would otherwise carry.
        from kernelbench_rl.evaluation.sandbox import runtime

        runtime.make_library_handles()
        torch.cuda.synchronize()
    levels: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="bare_") as workdir:
        for level, problems in sorted(chosen.items()):
            rows = []
            for problem in problems:
                try:
                    row = run_problem(problem, args.size, args.samples, settings, args.device, workdir)
                except torch.OutOfMemoryError as exc:
                    row = {"problem_id": problem.id, "error": f"out of device memory: {str(exc)[:160]}"}
                    torch.cuda.empty_cache()
                rows.append(row)
                if "error" in row:
                    say(f"  {problem.id}: {row['error']}")
                else:
                    say(f"  {problem.id}: {row['wall_s']:.2f} s bare, floor {row['floor_s']:.2f} s, call "
                        f"{(row['baseline_ms'] or 0):.3f} ms, fresh inputs {(row['inputs_ms'] or 0):.3f} ms"
                        + (f", WRONG: {row['wrong'][0]}" if row["wrong"] else ""))
            done = [r for r in rows if "error" not in r]
            wall = sum(r["wall_s"] for r in done)
            floor = sum(r["floor_s"] for r in done)
            levels[f"L{level}"] = {
                "problems": rows, "bare_wall_s": round(wall, 3), "floor_s": round(floor, 3),
                "bare_over_floor": round(wall / floor, 3) if floor else None,
                "parts_s": {k: round(sum(r["parts_s"][k] for r in done), 3) for k in ("build", "correctness", "timed", "baseline")},
                "complete": len(done) == len(rows),
            }
            say(f"L{level}: bare {wall:.2f} s against a floor of {floor:.2f} s"
                + (f" = {wall / floor:.2f}x" if floor else ""))
    return levels


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="mandated_floor.py", description=__doc__.split("\n\n")[0],
                                     epilog="Run by bench/grpo_batch.py before its warm batch, in a process of its own.")
    grpo_batch.add_batch_arguments(parser)
    parser.add_argument("--out", default=None, help="JSON output (default: print only)")
    return parser


def run(args: argparse.Namespace) -> int:
    grpo_batch.check_shape(args)
    chosen, _all, notes = grpo_batch.choose_problems(args, harness.resolve_root(args.problems_root, bundled=True))
    harness.require_cuda(args.device)
    settings = {"correctness_trials": args.correctness_trials, "warmup_trials": args.warmup_trials,
                "timing_trials": args.timing_trials, "samples_per_problem": args.samples}
    say(f"mandated floor: {sum(len(v) for v in chosen.values())} problems x {args.samples} samples on {args.device} "
        f"at {args.size} size, one process")
    levels = run_levels(chosen, args, settings)
    report = {"mode": "mandated-floor", "date": time.strftime("%Y-%m-%d"), "device": args.device, "size": args.size,
              "settings": settings, "notes": notes, "levels": levels, "gpu": harness.gpu_name(args.device) or "",
              "definition": __doc__.split("\n\n")[1]}
    harness.write_json(args.out, report, indent=1, announce=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    return harness.run_main(run, build_parser().parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
