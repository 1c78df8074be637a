"""The problem audit over a whole problem set, at the problems' real sizes on a GPU (or small sizes on the CPU).

    python3 bench/problem_audit.py --kernelbench-root .kb --size real --device cuda --out audit_real.json

Prints each problem that is not plainly ok (what passes, the widened inputs chosen, or why not) and the counts per
status and level; writes every problem's audit as JSON. It needs only torch (the GPU machine's image): the same
code as `kernelbench-rl problems audit`, without the CLI's stack. Levels run one after another (siblings are looked
for within a level), and the JSON is rewritten after each, so a run cut short keeps the levels it finished.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from collections import Counter
from datetime import date
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import torch  # noqa: E402

from kernelbench_rl.problems import load_problems  # noqa: E402
from kernelbench_rl.problems.audit import STATUSES, audit_problems  # noqa: E402


def summarise(audits, level_of, gpu, args, wall) -> dict:
    per_level = {}
    for level in sorted({level_of[a.problem_id] for a in audits}):
        tally = Counter(a.status for a in audits if level_of[a.problem_id] == level)
        per_level[f"L{level}"] = {status: tally.get(status, 0) for status in STATUSES}
    totals = Counter(a.status for a in audits)
    return {"date": date.today().isoformat(), "device": gpu, "size": args.size, "precision": args.precision,
            "torch": torch.__version__, "wall_s": round(wall, 1), "per_level": per_level,
            "counts": {k: totals.get(k, 0) for k in STATUSES}, "problems": [a.as_dict() for a in audits]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--problems-root", "--kernelbench-root", dest="kernelbench_root", default=None,
                        help="a KernelBench checkout or kernrl's problems folder (default: the bundled set)")
    parser.add_argument("--levels", default=None, help="comma-separated levels (default: all the root has)")
    parser.add_argument("--size", choices=("small", "real"), default="real")
    parser.add_argument("--device", choices=("cpu", "cuda"), default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--precision", choices=("fp32", "fp16", "bf16"), default="fp32")
    parser.add_argument("--no-siblings", action="store_true", help="skip other problems' references")
    parser.add_argument("--out", default=None, help="write the JSON here")
    args = parser.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("error: --device cuda needs a CUDA GPU; none is visible", file=sys.stderr)
        return 2
    levels = [int(x) for x in args.levels.split(",")] if args.levels else None
    problems = load_problems(args.kernelbench_root, levels=levels)
    started = time.perf_counter()
    done = [0]

    def progress(problem) -> None:
        done[0] += 1
        if done[0] % 25 == 1:
            print(f"  {done[0]}/{len(problems)} {problem.id} at {time.perf_counter() - started:.0f} s", flush=True)
        if args.device == "cuda":
            torch.cuda.empty_cache()

    level_of = {p.id: p.level for p in problems}
    gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else platform.processor() or "cpu"
    audits = []
    for level in sorted(set(level_of.values())):
        audits += audit_problems([p for p in problems if p.level == level], size=args.size, device=args.device,
                                 precision=args.precision, siblings=not args.no_siblings, progress=progress)
        summary = summarise(audits, level_of, gpu, args, time.perf_counter() - started)
        if args.out:
            Path(args.out).write_text(json.dumps(summary, indent=1))
    for audit in audits:
        if audit.status != "ok":
            passes = ", ".join(audit.trivial + [f"{s}'s reference" for s in audit.siblings])
            why = audit.detail if audit.status in ("fails", "unavailable") else audit.inputs
            print(f"{audit.problem_id:7s} {audit.name[:34]:34s} {audit.status:11s} {passes[:60]:60s} | {why[:160]}")
    print(f"{len(audits)} problems, {args.size} sizes on {gpu}, {summary['wall_s']} s")
    for level, tally in summary["per_level"].items():
        print(f"  {level}: " + "  ".join(f"{k} {v}" for k, v in tally.items()))
    print("  all: " + "  ".join(f"{k} {v}" for k, v in summary["counts"].items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
