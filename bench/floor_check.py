"""The speed-of-light check as a defence of its own: a kernel that does all the work on its first calls (the
correctness checks) and half of it once timing starts, judged with the other defences against that turned off
(timed calls' outputs not checked, input buffers reused), must still be flagged `below_speed_of_light` and earn no
speed reward, while the honest kernel is not flagged.

    python3 bench/floor_check.py --out floor_check.json      # on a GPU; L1/19 (ReLU) at its real size

Exit 0 when both verdicts are as expected. Needs a CUDA GPU.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

SKIPS_HALF = '''
import torch
import torch.nn as nn
import triton
import triton.language as tl


@triton.jit
def relu_kernel(x_ptr, out_ptr, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(out_ptr + offs, tl.maximum(tl.load(x_ptr + offs, mask=mask), 0.0), mask=mask)


class ModelNew(nn.Module):
    def __init__(self):
        super().__init__()
        self.calls = 0

    def forward(self, x):
        self.calls += 1
        out = torch.empty_like(x)
        n = x.numel() if self.calls <= 12 else x.numel() // 2  # the correctness checks get everything
        relu_kernel[(triton.cdiv(n, 4096),)](x, out, n, BLOCK=4096)
        return out
'''


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args(argv)
    os.environ["KBRL_EVAL_VERIFY_TIMED"] = "0"  # the workers inherit these: the other defences are off
    os.environ["KBRL_EVAL_FRESH_BUFFERS"] = "0"
    import torch

    if not torch.cuda.is_available():
        print("error: this check times kernels on a GPU; none is visible", file=sys.stderr)
        return 2
    from kernelbench_rl.evaluation.front.api import Evaluator
    from kernelbench_rl.evaluation.result import EvalRequest, EvalSettings, Flag
    from kernelbench_rl.problems import get_problem, load_solution

    settings = EvalSettings(device="cuda", size="real", timeout_s=300)
    honest = load_solution(get_problem("L1/19"))
    with Evaluator(settings, static_checks=False) as evaluator:
        results = evaluator.evaluate([EvalRequest("L1/19", honest, settings), EvalRequest("L1/19", SKIPS_HALF, settings)])
    rows = []
    for label, result in zip(("honest", "skips half once timed"), results):
        sol = result.speed_of_light or {}
        rows.append({"kernel": label, "correct": result.correct, "runtime_ms": result.runtime_ms,
                     "baseline_ms": result.baseline_ms, "speedup": result.speedup, "floor_ms": sol.get("floor_ms"),
                     "sol_fraction": sol.get("sol_fraction"), "speedup_counts": result.speedup_counts,
                     "flags": result.flags, "hardware": result.hardware, "message": result.error_message[:200]})
        print(f"{label:24s} correct={result.correct} runtime {result.runtime_ms} ms, floor {sol.get('floor_ms')} ms, "
              f"sol {sol.get('sol_fraction')}, speedup {result.speedup} (counts: {result.speedup_counts}), flags {result.flags}")
    honest_ok = Flag.BELOW_SPEED_OF_LIGHT.value not in results[0].flags and results[0].correct
    caught = Flag.BELOW_SPEED_OF_LIGHT.value in results[1].flags and not results[1].speedup_counts
    print(f"honest not flagged: {honest_ok}; half-work kernel caught by the floor alone: {caught}")
    if args.out:
        Path(args.out).write_text(json.dumps({"results": rows, "honest_not_flagged": honest_ok, "caught": caught}, indent=1))
    return 0 if honest_ok and caught else 1


if __name__ == "__main__":
    sys.exit(main())
