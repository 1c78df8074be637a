"""A naive, KernelBench-style harness: the comparison point for bench/eval_throughput.py and
bench/gpu_redteam.py. Written from the description of KernelBench's scripts (REFERENCE.md), not
from their code, and deliberately keeping their weaknesses:

- one fresh Python process per candidate, run sequentially;
- the reference and the candidate are loaded IN the same process, with the comparison and timer;
- inputs come from `get_inputs()` on the CPU every correctness trial and are copied to the device;
- seeds are fixed and public (42, and correctness seeds drawn from a generator seeded with 42);
- `torch.allclose` (atol = rtol = 1e-4 for fp32) and a shape check, over N trials;
- timing: one input set for all timed calls, 3 warm-ups, L2 flush (256 MB) before each trial, CUDA
  events on the current stream, mean; the reference's time is measured once per problem (as
  KernelBench's baseline script does) and reused.

Only this module's `--child` mode runs candidate code, and only in its own subprocess.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import harness  # noqa: E402 - after the path set-up above (the standard library only, at import)

RESULT_PREFIX = "NAIVE_RESULT "
KERNELBENCH_SEED = 42
L2_FLUSH_BYTES = 256 * 1024 * 1024


@dataclass
class NaiveSettings:
    device: str = "cuda"  # "cuda" or "cpu" (Triton interpreter, host clock, no L2 flush)
    correctness_trials: int = 5
    timing_trials: int = 100
    warmup_trials: int = 3
    atol: float = 1e-4
    rtol: float = 1e-4
    timeout_s: float = 120.0


@dataclass
class NaiveResult:
    label: str
    problem_id: str
    compiled: bool = False
    correct: bool = False
    trials_passed: int = 0
    runtime_ms: float | None = None  # mean, as KernelBench reports it
    baseline_ms: float | None = None
    speedup: float | None = None
    error: str = ""
    timed_out: bool = False
    wall_s: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class NaiveHarness:
    """Runs candidates one process at a time; remembers each problem's baseline time."""

    def __init__(self, settings: NaiveSettings | None = None) -> None:
        self.settings = settings or NaiveSettings()
        self._baselines: dict[str, float] = {}

    def evaluate(self, problem_id: str, problem_source: str, candidate_source: str, label: str = "") -> NaiveResult:
        baseline = self._baselines.get(problem_id)
        result = run_naive(problem_id, problem_source, candidate_source, self.settings,
                           label=label, known_baseline_ms=baseline)
        if baseline is None and result.baseline_ms is not None:
            self._baselines[problem_id] = result.baseline_ms
        if result.runtime_ms and result.baseline_ms:
            result.speedup = result.baseline_ms / result.runtime_ms
        return result


def run_naive(problem_id: str, problem_source: str, candidate_source: str, settings: NaiveSettings, *, label: str = "",
              known_baseline_ms: float | None = None) -> NaiveResult:
    """One candidate, one fresh process; the result is the last NAIVE_RESULT line it printed."""
    result = NaiveResult(label=label, problem_id=problem_id)
    with tempfile.TemporaryDirectory(prefix="naive_harness_") as workdir:
        work = Path(workdir)
        (work / "reference.py").write_text(problem_source)
        (work / "candidate_kernel.py").write_text(candidate_source)
        spec = {"workdir": workdir, "settings": asdict(settings), "known_baseline_ms": known_baseline_ms}
        (work / "spec.json").write_text(json.dumps(spec))
        env = {**os.environ, **({"TRITON_INTERPRET": "1"} if settings.device == "cpu" else {})}
        parsed, result.wall_s, tail, result.timed_out = harness.run_child(
            [str(Path(__file__).resolve()), "--child", str(work / "spec.json")], env, workdir, settings.timeout_s,
            RESULT_PREFIX)
    if result.timed_out:
        result.error = f"timed out after {settings.timeout_s:.0f} s"
    if parsed is not None:
        for key in ("compiled", "correct", "trials_passed", "runtime_ms", "baseline_ms", "error", "phase_seconds"):
            if key in parsed:
                setattr(result, key, parsed[key])
    elif not result.timed_out:
        result.error = f"process ended with no result: {tail[:200]}"
    return result


# ---------------------------------------------------------------- child side (candidate code runs here)


def _child(spec_path: str) -> None:
    spec = json.loads(Path(spec_path).read_text())
    settings = NaiveSettings(**spec["settings"])
    out: dict[str, Any] = {"compiled": False, "correct": False, "trials_passed": 0, "phase_seconds": {}}
    phases: dict[str, float] = out["phase_seconds"]
    try:
        _child_run(spec, settings, out, phases)
    except Exception as exc:  # the naive harness reports any failure as a message
        out["error"] = f"{type(exc).__name__}: {str(exc)[:300]}"
    print(RESULT_PREFIX + json.dumps(out), flush=True)


def _child_run(spec: dict[str, Any], settings: NaiveSettings, out: dict[str, Any], phases: dict[str, float]) -> None:
    import importlib.util

    t0 = time.perf_counter()
    import torch

    phases["import_torch"] = time.perf_counter() - t0
    device = torch.device(settings.device)
    is_cuda = device.type == "cuda"

    def set_seed(seed: int) -> None:
        torch.manual_seed(seed)
        if is_cuda:
            torch.cuda.manual_seed(seed)

    def sync() -> None:
        if is_cuda:
            torch.cuda.synchronize(device)

    def to_device(values: list[Any]) -> list[Any]:
        return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]

    workdir = Path(spec["workdir"])
    reference: dict[str, Any] = {}
    exec(compile((workdir / "reference.py").read_text(), str(workdir / "reference.py"), "exec"), reference)

    t0 = time.perf_counter()
    try:
        module_spec = importlib.util.spec_from_file_location("candidate_kernel", workdir / "candidate_kernel.py")
        module = importlib.util.module_from_spec(module_spec)
        sys.modules["candidate_kernel"] = module
        module_spec.loader.exec_module(module)
        model_new_cls = module.ModelNew
        set_seed(KERNELBENCH_SEED)
        init_inputs = to_device(reference["get_init_inputs"]())
        with torch.no_grad():
            set_seed(KERNELBENCH_SEED)
            model = reference["Model"](*init_inputs).to(device)
            set_seed(KERNELBENCH_SEED)
            model_new = model_new_cls(*init_inputs).to(device)
        sync()
    except Exception as exc:
        out["error"] = f"compile: {type(exc).__name__}: {str(exc)[:300]}"
        phases["compile"] = time.perf_counter() - t0
        return
    out["compiled"] = True
    phases["compile"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    torch.manual_seed(KERNELBENCH_SEED)
    trial_seeds = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(settings.correctness_trials)]
    with torch.no_grad():
        for seed in trial_seeds:
            set_seed(seed)
            inputs = to_device(reference["get_inputs"]())
            output = model(*inputs)
            sync()
            try:
                output_new = model_new(*inputs)
                sync()
            except Exception as exc:
                out["error"] = f"runtime: {type(exc).__name__}: {str(exc)[:300]}"
                break
            if output.shape != output_new.shape:
                out["error"] = f"shape mismatch: expected {tuple(output.shape)}, got {tuple(output_new.shape)}"
                break
            if not torch.allclose(output, output_new, atol=settings.atol, rtol=settings.rtol):
                out["error"] = "output mismatch"
                break
            out["trials_passed"] += 1
    phases["correctness"] = time.perf_counter() - t0
    if "error" in out:
        return
    out["correct"] = True

    t0 = time.perf_counter()
    set_seed(KERNELBENCH_SEED)
    inputs = to_device(reference["get_inputs"]())
    with torch.no_grad():
        out["runtime_ms"] = _time_mean_ms(model_new, inputs, settings, device)
        phases["timing"] = time.perf_counter() - t0
        if spec.get("known_baseline_ms") is None:
            t0 = time.perf_counter()
            out["baseline_ms"] = _time_mean_ms(model, inputs, settings, device)
            phases["baseline"] = time.perf_counter() - t0
        else:
            out["baseline_ms"] = spec["known_baseline_ms"]


def _time_mean_ms(fn: Any, inputs: list[Any], settings: NaiveSettings, device: Any) -> float:
    import torch

    is_cuda = device.type == "cuda"
    for _ in range(settings.warmup_trials):
        fn(*inputs)
    if is_cuda:
        torch.cuda.synchronize(device)
    times: list[float] = []
    for _ in range(settings.timing_trials):
        if is_cuda:
            flush = torch.empty(L2_FLUSH_BYTES, dtype=torch.int8, device=device)
            flush.zero_()
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            torch.cuda.synchronize(device)
            times.append(start.elapsed_time(end))
        else:
            begin = time.perf_counter()
            fn(*inputs)
            times.append((time.perf_counter() - begin) * 1000.0)
    return sum(times) / len(times)


def run(args: argparse.Namespace) -> int:
    from kernelbench_rl.errors import UserError
    from kernelbench_rl.problems import get_problem

    if not (args.problem and args.candidate):
        raise harness.BadInput("Give --problem (e.g. L1/19) and --candidate FILE.")
    try:
        problem, source = get_problem(args.problem), Path(args.candidate).read_text()
    except (UserError, KeyError, ValueError, OSError) as exc:
        raise harness.BadInput(f"Cannot evaluate {args.candidate} on {args.problem}: {exc}") from None
    size = args.size or ("real" if args.device == "cuda" else "small")
    settings = NaiveSettings(device=args.device, correctness_trials=args.trials, timing_trials=args.timing_trials,
                             timeout_s=args.timeout)
    result = NaiveHarness(settings).evaluate(problem.id, problem.source_for(size), source, label=Path(args.candidate).stem)
    print(json.dumps(result.to_dict(), indent=2))
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help="internal: run one candidate from this spec file")
    parser.add_argument("--problem", help="problem id, e.g. L1/19 (with --candidate)")
    parser.add_argument("--candidate", help="candidate source file")
    harness.add_device(parser, size=None)
    parser.add_argument("--trials", type=int, default=5)
    parser.add_argument("--timing-trials", type=int, default=100)
    parser.add_argument("--timeout", type=float, default=120.0)
    args = parser.parse_args(argv)
    if args.child:
        _child(args.child)
        return 0
    return harness.run_main(run, args)


if __name__ == "__main__":
    sys.exit(main())
