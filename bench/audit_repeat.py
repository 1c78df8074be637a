"""How often a problem's input audit flags it, over many random seed draws: two seeds alone against two seeds plus
the confirmation of a memorised answer on more (discrimination.confirm_memorised).

A worker audits each problem once, on seeds of its own drawn at random, so a verdict that depends on the draw makes
a problem's candidates get no verdict in some runs and a verdict in others. This draws `--repeats` seed sets per
problem, runs the audit both ways on each, and counts how often each way flags a trivial candidate on the problem's
own inputs, how often that leaves no verdict (no widened inputs help), and the own seeds a candidate would get.

    python3 bench/audit_repeat.py --problems-root .kb --problems L1/95,L2/36,L3/18,L3/28 --repeats 30 --out r.json
    python3 bench/audit_repeat.py --device cpu --size small --problems L1/95 --repeats 3    # machinery only
"""

from __future__ import annotations

import argparse
import json
import secrets
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def flag_rates(problem, size: str, device: str, repeats: int) -> dict:
    """For one problem: per way, how many draws flagged a trivial candidate on its own inputs, and which."""
    from kernelbench_rl.evaluation import discrimination
    from kernelbench_rl.evaluation.result import tolerance_for
    from kernelbench_rl.problems.audit import _load, _runner

    precision = "fp32"
    atol, rtol = tolerance_for(problem.suite, precision)
    loaded = _load(problem, size, device, precision)
    run = _runner(loaded, device, precision)
    ways = {"two seeds": 2, "confirmed": 2 + discrimination.CONFIRMATION_SEEDS}
    counts = {way: {"flagged": 0, "no verdict": 0, "trivial": {}, "own_seeds": {}} for way in ways}
    notes = []
    started = time.perf_counter()
    for _ in range(repeats):
        seeds = [secrets.randbits(31) for _ in range(max(ways.values()))]
        for way, used in ways.items():
            found = discrimination.discriminate(run, seeds[:used], atol, rtol)
            counts[way]["no verdict"] += int(not found.discriminating)
            key = str(found.own_seeds)
            counts[way]["own_seeds"][key] = counts[way]["own_seeds"].get(key, 0) + 1
            if found.trivial:
                counts[way]["flagged"] += 1
                for name in found.trivial:
                    counts[way]["trivial"][name] = counts[way]["trivial"].get(name, 0) + 1
            if found.confirmation and len(notes) < 5:
                notes.append(found.confirmation)
    return {"problem_id": problem.id, "name": problem.name, "repeats": repeats, "ways": counts,
            "confirmations": notes, "wall_s": round(time.perf_counter() - started, 2)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="audit_repeat.py", description=__doc__.split("\n\n")[0])
    parser.add_argument("--problems-root", "--kernelbench-root", dest="problems_root", default=None,
                        help="a KernelBench checkout (default: the bundled set)")
    parser.add_argument("--problems", default="L1/95", help="problem ids, comma-separated (default L1/95)")
    parser.add_argument("--repeats", type=int, default=30, help="seed draws per problem (default 30)")
    parser.add_argument("--device", choices=["cuda", "cpu"], default="cuda")
    parser.add_argument("--size", choices=["real", "small"], default="real",
                        help="the problems' own sizes (real, default) or the small ones the CPU can run")
    parser.add_argument("--out", default=None, help="JSON output (default: print only)")
    args = parser.parse_args(argv)
    from kernelbench_rl.errors import UserError
    from kernelbench_rl.problems import BUNDLED_ROOT, load_problems, parse_problem_id

    wanted = [p.strip() for p in args.problems.split(",") if p.strip()]
    try:
        levels = sorted({parse_problem_id(p)[0] for p in wanted})
        problems = {p.id: p for p in load_problems(str(args.problems_root or BUNDLED_ROOT), levels)}
    except (UserError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    missing = [p for p in wanted if p not in problems]
    if missing or args.repeats < 1:
        print(f"error: {'no problem ' + ', '.join(missing) if missing else '--repeats takes at least 1'}.", file=sys.stderr)
        return 2
    import torch

    from kernelbench_rl.evaluation import numerics

    numerics.apply()
    rows = []
    for problem_id in wanted:
        row = flag_rates(problems[problem_id], args.size, args.device, args.repeats)
        rows.append(row)
        print(f"{problem_id}: " + ", ".join(f"{way} flagged {c['flagged']}/{row['repeats']} (no verdict {c['no verdict']}, "
                                           f"own seeds {c['own_seeds']})" for way, c in row["ways"].items())
              + f" ({row['wall_s']} s)", flush=True)
        if args.device == "cuda":
            torch.cuda.empty_cache()
    if args.out:
        gpu = torch.cuda.get_device_name(0) if args.device == "cuda" else ""
        Path(args.out).write_text(json.dumps({"mode": "audit-repeat", "date": time.strftime("%Y-%m-%d"), "gpu": gpu,
                                              "size": args.size, "problems": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
