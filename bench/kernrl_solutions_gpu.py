"""Our Triton solutions to the bundled level 4-10 problems, run against kernrl's own problem files at real size.

    python3 bench/kernrl_solutions_gpu.py --kernrl-root ../shared/kernrl --out kernrl_solutions_h100.json

For each solution in KernelBench/solutions/level4..level10: kernrl's problem of the same file name is loaded
from --kernrl-root (the snapshot's folder, its problems/ folder, or an OpenEnv checkout), both models are built
from the same seed and moved to the GPU, and both are fed the same inputs made by kernrl's get_inputs. Outputs
are compared as kernrl's evaluator does (atol 0.05, rtol 0.02 for floating outputs; integer and boolean outputs
exactly), over two seeds, with the inputs checked to be unchanged. Each side is then timed: warm-up calls, then
the median of timed calls, CUDA events around each call. References run in exact fp32 (no TF32 in matmul or
cuDNN), as our evaluator runs them. Prints one line per problem, writes every figure to --out, and exits 1 if
any solution is wrong or fails. Needs only torch and triton.
"""

from __future__ import annotations

import argparse
import ast
import importlib.util
import json
import re
import statistics
import sys
import time
import traceback
from datetime import date
from pathlib import Path

import torch
import triton

REPO = Path(__file__).resolve().parents[1]
SOLUTIONS = REPO / "KernelBench" / "solutions"
LEVELS = range(4, 11)
ATOL, RTOL = 0.05, 0.02  # kernrl's defaults
SEEDS = (42, 7)


def problems_folder(root: Path) -> Path:
    for candidate in (root / "problems", root, root / "envs" / "kernrl" / "problems"):
        if (candidate / "level4").is_dir():
            return candidate
    sys.exit(f"{root} holds no kernrl problems (looked for level4/ in it, in problems/ and in envs/kernrl/problems/).")


def load_module(path: Path, name: str):
    # From the file itself: compiled (non-interpreted) @triton.jit reads its kernels' source from there.
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def small_sizes(path: Path) -> dict:
    """The KBRL_SMALL_SIZES literal of our bundled problem of that name (for --small)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["KBRL_SMALL_SIZES"]:
            return ast.literal_eval(node.value)
    return {}


def to_device(values, device: str):
    return [v.to(device) if isinstance(v, torch.Tensor) else v for v in values]


def as_outputs(out) -> list[torch.Tensor]:
    return list(out) if isinstance(out, (tuple, list)) else [out]


def compare(expected: list[torch.Tensor], got: list[torch.Tensor]) -> tuple[str | None, float]:
    """(why it is wrong or None, the largest absolute error over floating outputs)."""
    if len(got) != len(expected):
        return f"{len(got)} outputs, expected {len(expected)}", 0.0
    worst = 0.0
    for index, (e, g) in enumerate(zip(expected, got)):
        if not isinstance(g, torch.Tensor):
            return f"output {index} is {type(g).__name__}, not a tensor", worst
        if g.shape != e.shape or g.dtype != e.dtype:
            return f"output {index} is {tuple(g.shape)} {g.dtype}, expected {tuple(e.shape)} {e.dtype}", worst
        g = g.to(e.device)
        if e.is_floating_point() or e.is_complex():
            if e.numel():
                worst = max(worst, float((g.double() - e.double()).abs().max()))
            if not torch.allclose(g, e, atol=ATOL, rtol=RTOL):
                bad = int((~torch.isclose(g, e, atol=ATOL, rtol=RTOL)).sum())
                return f"output {index} differs at {bad} of {e.numel()} elements (max abs error {worst:.3g})", worst
        elif not torch.equal(g, e):
            return f"output {index} differs at {int((g != e).sum())} of {e.numel()} elements (exact)", worst
    return None, worst


def time_ms(fn, inputs, warmup: int, iters: int, device: str) -> float:
    cuda = device.startswith("cuda")
    with torch.no_grad():
        for _ in range(warmup):
            fn(*inputs)
        if cuda:
            torch.cuda.synchronize()
        times = []
        for _ in range(iters):
            if not cuda:  # the --device cpu dry run: wall time is all there is
                t0 = time.perf_counter()
                fn(*inputs)
                times.append((time.perf_counter() - t0) * 1000)
                continue
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(*inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
    return statistics.median(times)


def build(cls, init, seed: int, device: str):
    torch.manual_seed(seed)
    return cls(*init).to(device)


def run_one(problem_path: Path, solution_path: Path, args: argparse.Namespace) -> dict:
    reference = load_module(problem_path, "kernrl_" + re.sub(r"\W", "_", problem_path.stem))
    solution = load_module(solution_path, "solution_" + re.sub(r"\W", "_", solution_path.stem))
    if args.small:  # get_inputs reads the module's constants when called
        for name, value in small_sizes(REPO / "KernelBench" / solution_path.parent.name / solution_path.name).items():
            setattr(reference, name, value)
    device = args.device
    result: dict = {"correct": False, "max_abs_err": 0.0}
    for seed in SEEDS:
        torch.manual_seed(seed)
        inputs = to_device(reference.get_inputs(), device)
        init = reference.get_init_inputs()
        model, model_new = build(reference.Model, init, seed, device), build(solution.ModelNew, init, seed, device)
        originals = [v.clone() if isinstance(v, torch.Tensor) else v for v in inputs]
        with torch.no_grad():
            expected = as_outputs(model(*inputs))
            got = as_outputs(model_new(*inputs))
        if device.startswith("cuda"):
            torch.cuda.synchronize()
        error, err = compare(expected, got)
        result["max_abs_err"] = max(result["max_abs_err"], err)
        if error is None and any(isinstance(a, torch.Tensor) and not torch.equal(a, b) for a, b in zip(originals, inputs)):
            error = "the solution modified its inputs"
        if error is not None:
            result["error"] = f"seed {seed}: {error}"
            return result
        del expected, got, originals
    result["correct"] = True
    result["reference_ms"] = time_ms(model, inputs, args.warmup, args.iters, device)
    result["solution_ms"] = time_ms(model_new, inputs, args.warmup, args.iters, device)
    result["speedup"] = result["reference_ms"] / result["solution_ms"] if result["solution_ms"] > 0 else None
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--kernrl-root", required=True, type=Path, help="kernrl's snapshot (or its problems/ folder, or an OpenEnv checkout)")
    parser.add_argument("--out", type=Path, default=Path("kernrl_solutions_gpu.json"))
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--iters", type=int, default=10)
    parser.add_argument("--device", default="cuda", help="cuda (default); cpu is a dry run that needs TRITON_INTERPRET=1")
    parser.add_argument("--small", action="store_true", help="our bundled problems' CPU sizes instead of the real ones")
    args = parser.parse_args()
    if args.device.startswith("cuda") and not torch.cuda.is_available():
        print("No CUDA device: this script compares and times on a GPU (or --device cpu --small for a dry run).",
              file=sys.stderr)
        return 2
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    problems = problems_folder(args.kernrl_root.expanduser())
    rows = []
    for level in LEVELS:
        for solution_path in sorted((SOLUTIONS / f"level{level}").glob("*.py")):
            row = {"id": f"L{level}/{solution_path.name.split('_')[0]}", "name": solution_path.stem}
            problem_path = problems / f"level{level}" / solution_path.name
            if not problem_path.is_file():
                row.update(correct=False, error=f"kernrl has no level{level}/{solution_path.name}")
            else:
                try:
                    row.update(run_one(problem_path, solution_path, args))
                except Exception as exc:  # noqa: BLE001 - one problem's failure is its row, the rest still run
                    row.update(correct=False, error=f"{type(exc).__name__}: {exc}",
                               traceback=traceback.format_exc(limit=4))
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            rows.append(row)
            if row["correct"]:
                print(f"{row['id']:7} {row['name']:32} correct  max_abs_err {row['max_abs_err']:.3g}  "
                      f"reference {row['reference_ms']:.3f} ms  ours {row['solution_ms']:.3f} ms  "
                      f"speedup {row['speedup']:.2f}x", flush=True)
            else:
                print(f"{row['id']:7} {row['name']:32} FAILED   {row['error']}", flush=True)
    report = {
        "date": date.today().isoformat(), "device": args.device, "small": args.small,
        "gpu": torch.cuda.get_device_name() if args.device.startswith("cuda") else None, "torch": torch.__version__,
        "triton": triton.__version__, "kernrl_problems": str(problems), "atol": ATOL, "rtol": RTOL,
        "warmup": args.warmup, "iters": args.iters, "results": rows,
    }
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    failed = [r["id"] for r in rows if not r["correct"]]
    print(f"{len(rows) - len(failed)}/{len(rows)} correct on {report['gpu'] or args.device}; figures in {args.out}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
