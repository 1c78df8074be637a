"""Does a finished torch.profiler (CUPTI) session slow the kernel launches a process makes afterwards?

Our sandboxed child profiles each candidate (kernel share) and warmed CUPTI before timing, while the
worker that times the baseline never profiles; on launch-bound KernelBench level-3 models identical
code then read as slow as 0.57x. This times one model's forward in two fresh processes, one with a
profiler session first, and prints the ratio.

    python bench/profiler_overhead_probe.py --kernelbench-root .kb --problem L3/32
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))


def _child(root: str, problem_id: str, warm_profiler: bool) -> float:
    import torch

    from kernelbench_rl.evaluation import numerics, runtime, timing
    from kernelbench_rl.problems import get_problem

    numerics.apply()
    problem = get_problem(problem_id, root)
    path = Path("/tmp") / f"probe_{problem.level}_{problem.number}.py"
    path.write_text(problem.source)
    module = runtime.load_module_from_file(path, "probe_problem")
    torch.cuda.init()
    if warm_profiler:
        from torch.profiler import ProfilerActivity, profile

        with profile(activities=[ProfilerActivity.CUDA]):
            torch.ones(1, device="cuda").add_(1)
            torch.cuda.synchronize()
    model = runtime.build_model(module.Model, module, 1, "cuda", "fp32")
    record = timing.time_forward(model, lambda s: runtime.make_inputs(module, s, "cuda", "fp32"), list(range(50)), 3,
                                 "cuda", timing.Clock.capture())
    return record.median_ms


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--problems-root", "--kernelbench-root", dest="kernelbench_root", required=True)
    parser.add_argument("--problem", action="append", required=True, help="e.g. L3/32 (repeatable)")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps({"ms": _child(args.kernelbench_root, args.child[0], args.child[1] == "1")}))
        return
    for problem_id in args.problem:
        times = {}
        for warm in ("0", "1"):
            out = subprocess.run([sys.executable, __file__, "--kernelbench-root", args.kernelbench_root, "--problem",
                                  problem_id, "--child", problem_id, warm, "x"], capture_output=True, text=True, check=False)
            line = [ln for ln in out.stdout.splitlines() if ln.startswith("{")]
            times[warm] = json.loads(line[-1])["ms"] if line else None
            if not line:
                print(out.stderr[-800:], file=sys.stderr)
        plain, profiled = times["0"], times["1"]
        ratio = f"{plain / profiled:.3f}" if plain and profiled else "n/a"
        print(f"{problem_id}: median {plain} ms without, {profiled} ms after a profiler session: speedup-equivalent {ratio}")


if __name__ == "__main__":
    main()
